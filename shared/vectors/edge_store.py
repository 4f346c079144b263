"""The embedded engine: Qdrant Edge (`qdrant-edge-py`), Qdrant's own Rust segment engine in
this process — HNSW, payload indexes (is_tenant), filters — one shard folder per collection.

Measured against qdrant-client's local mode in ADR 0012. What to know (qdrant-edge 0.9.0):
- one opener per folder: this store takes a lock on the root folder first, so a second
  process is refused at once with the holder named (shared.vectors.folder_owner);
- a call holds the GIL for its whole length: keep calls small (per-user reads and writes);
  nothing here runs `optimize()`, which would stall every thread of the process;
- a boolean payload value cannot be matched (True is read as 1): such filters are refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import re
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Literal

import qdrant_edge as qe

from shared.errors import InvalidInput, PermanentError, Unavailable
from shared.vectors.base import (
    PayloadFilter,
    Vector,
    VectorHit,
    VectorPoint,
    as_floats,
    canonical_id,
    ordered_hits,
    uniform_vectors,
)
from shared.vectors.folder_owner import clear_owner, describe_holder, write_owner

logger = logging.getLogger(__name__)

SHARD_CONFIG = "edge_config.json"  # Edge writes it in every shard folder
ROOT_LOCK = ".tiermem-edge.lock"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")


class EdgeVectorStore:
    """The VectorStore protocol over Qdrant Edge shards under one folder."""

    def __init__(self, *, path: str) -> None:
        self._path = Path(path).resolve()
        self._path.mkdir(parents=True, exist_ok=True)
        self._lock_file = self._take_folder()
        write_owner(self._path)
        self._lock = threading.RLock()  # guards the shard table, not the engine's calls
        self._shards: dict[str, qe.EdgeShard] = {}
        self._dims: dict[str, int] = {}
        self._closed = False

    def _take_folder(self) -> IO[str]:
        handle = (self._path / ROOT_LOCK).open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            handle.close()
            holder, owner = describe_holder(self._path)
            raise Unavailable(
                f"The embedded vector folder {self._path} is held by {holder}; the embedded "
                "engine allows one process per folder. Stop that process, or run `tiermem "
                "serve` (API and worker in one process), or point TIERMEM_QDRANT__URL at a "
                "Qdrant server.",
                details={"path": str(self._path), "holder": owner},
            ) from exc
        return handle

    @property
    def mode(self) -> Literal["embedded"]:
        return "embedded"

    def __repr__(self) -> str:
        return f"EdgeVectorStore(path={str(self._path)!r})"

    # -- shards ---------------------------------------------------------------------------

    def _folder(self, collection: str) -> Path:
        if not _NAME.fullmatch(collection):
            raise InvalidInput(
                f"collection names are 1-255 letters, digits, '_' or '-', got {collection!r}"
            )
        return self._path / collection

    def _shard(self, collection: str) -> qe.EdgeShard | None:
        """The open shard, loading it on first use; None when the collection is missing."""
        shard = self._shards.get(collection)
        if shard is not None:
            return shard
        folder = self._folder(collection)
        with self._lock:
            self._check_open()
            shard = self._shards.get(collection)
            if shard is None and (folder / SHARD_CONFIG).exists():
                shard = self._shards[collection] = qe.EdgeShard.load(str(folder))
                self._dims[collection] = _dim_of(folder)
            return shard

    def ensure_collection(
        self, collection: str, dim: int, *, tenant_field: str | None = None
    ) -> None:
        if dim <= 0:
            raise InvalidInput(f"vector dimension must be positive, got {dim}")
        if self._shard(collection) is None:
            with self._lock:
                if collection not in self._shards:
                    self._create(collection, dim, tenant_field)
        known = self._dims[collection]
        if known != dim:
            raise PermanentError(
                f"vector collection {collection} holds {known}-dimension vectors but got "
                f"{dim}; was the embedding model changed? Rebuild vectors with `tiermem reindex`.",
                details={"collection": collection, "expected_dim": known, "got_dim": dim},
            )

    def _create(self, collection: str, dim: int, tenant_field: str | None) -> None:
        folder = self._folder(collection)
        if folder.exists():  # a shard that never finished being created: start it afresh
            shutil.rmtree(folder)
        vectors = qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)
        if tenant_field is None:
            config = qe.EdgeConfig(vectors=vectors)
        else:
            # Qdrant's multitenancy setting: no global graph (a user's query is narrowed by
            # the tenant index to their few points, scored exactly), graphs per tenant.
            hnsw = qe.HnswIndexConfig(
                m=0, ef_construct=100, full_scan_threshold=10_000, payload_m=16
            )
            config = qe.EdgeConfig(vectors=vectors, hnsw_config=hnsw)
        shard = qe.EdgeShard.create(str(folder), config)
        if tenant_field is not None:
            index = qe.KeywordIndexParams(is_tenant=True)
            shard.update(qe.UpdateOperation.create_field_index(tenant_field, index))
        self._shards[collection] = shard
        self._dims[collection] = dim
        logger.info("created vector collection", extra={"collection": collection, "dim": dim})

    # -- VectorStore ------------------------------------------------------------------------

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        vectors = uniform_vectors(points, collection)
        dim = len(vectors[0])
        structs = [
            qe.Point(canonical_id(p.id), v, p.payload) for p, v in zip(points, vectors, strict=True)
        ]
        self.ensure_collection(collection, dim)
        shard = self._shard(collection)
        assert shard is not None
        shard.update(qe.UpdateOperation.upsert_points(structs))

    def delete(
        self, collection: str, ids: Sequence[str], *, payload_filter: PayloadFilter | None = None
    ) -> None:
        if not ids:
            return
        canonical: list[Any] = [canonical_id(i) for i in ids]
        shard = self._shard(collection)
        if shard is None:
            return
        if payload_filter:
            scoped = _to_filter(payload_filter, has_ids=canonical)
            shard.update(qe.UpdateOperation.delete_points_by_filter(scoped))
        else:
            shard.update(qe.UpdateOperation.delete_points(canonical))

    def delete_where(self, collection: str, payload_filter: PayloadFilter) -> None:
        if not payload_filter:
            raise InvalidInput("delete_where needs a filter; drop_collection removes everything")
        where = _to_filter(payload_filter)
        shard = self._shard(collection)
        if shard is not None:
            shard.update(qe.UpdateOperation.delete_points_by_filter(where))

    def search(
        self,
        collection: str,
        vector: Vector,
        *,
        limit: int,
        score_threshold: float | None = None,
        payload_filter: PayloadFilter | None = None,
    ) -> list[VectorHit]:
        if limit <= 0:
            return []
        query = as_floats(vector)
        where = _to_filter(payload_filter) if payload_filter else None
        shard = self._shard(collection)
        if shard is None:
            return []
        if len(query) != self._dims[collection]:
            raise InvalidInput(
                f"query vector has {len(query)} dimensions, collection {collection} "
                f"holds {self._dims[collection]}",
                details={"collection": collection},
            )
        request = qe.QueryRequest(
            query=qe.Query.Nearest(query),
            limit=limit,
            filter=where,
            with_payload=True,
            score_threshold=score_threshold,
        )
        return [
            VectorHit(id=str(h.id), score=float(h.score), payload=h.payload or {})
            for h in shard.query(request)
        ]

    def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[VectorHit]:
        wanted: list[Any] = list(dict.fromkeys(canonical_id(i) for i in ids))
        shard = self._shard(collection) if wanted else None
        if shard is None:
            return []
        records = shard.retrieve(wanted, True, with_vectors)
        return ordered_hits(wanted, records, with_vectors=with_vectors)

    def count(self, collection: str, *, payload_filter: PayloadFilter | None = None) -> int:
        where = _to_filter(payload_filter) if payload_filter else None
        shard = self._shard(collection)
        if shard is None:
            return 0
        return int(shard.count(qe.CountRequest(filter=where)))

    def drop_collection(self, collection: str) -> None:
        folder = self._folder(collection)
        with self._lock:
            shard = self._shards.pop(collection, None)
            self._dims.pop(collection, None)
            if shard is not None:
                shard.close()
            if folder.exists():
                shutil.rmtree(folder)
                logger.info("dropped vector collection", extra={"collection": collection})

    def list_collections(self) -> list[str]:
        return sorted(p.parent.name for p in self._path.glob(f"*/{SHARD_CONFIG}"))

    def flush(self) -> None:
        with self._lock:
            for shard in self._shards.values():
                shard.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for shard in self._shards.values():
                with contextlib.suppress(Exception):  # closing the rest matters more
                    shard.flush()
                shard.close()
            self._shards.clear()
            clear_owner(self._path)  # while the folder is still ours
            self._lock_file.close()  # releases the folder lock

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the vector store is closed")


def _dim_of(folder: Path) -> int:
    config = json.loads((folder / SHARD_CONFIG).read_text(encoding="utf-8"))
    vectors = config.get("vectors", {})
    params = vectors.get("") if isinstance(vectors, dict) and "" in vectors else vectors
    if not isinstance(params, dict) or params.get("distance") != "Cosine" or "size" not in params:
        raise PermanentError(
            f"vector folder {folder} was not created by tiermem (expected one unnamed cosine "
            "vector); remove it or use another TIERMEM_QDRANT__PATH",
            details={"folder": str(folder)},
        )
    return int(params["size"])


def _to_filter(payload_filter: PayloadFilter, *, has_ids: Sequence[str] = ()) -> qe.Filter:
    conditions: list[Any] = [qe.HasIdCondition(point_ids=set(has_ids))] if has_ids else []
    for key, value in payload_filter.items():
        several = isinstance(value, list | tuple | set | frozenset)
        options = list(value) if several else [value]
        if any(isinstance(v, bool) for v in options):
            raise InvalidInput(
                f"payload filter {key!r}: the embedded engine cannot match a boolean value "
                "(qdrant-edge reads True as 1); store and match it as a string",
                details={"key": key},
            )
        if not (
            all(isinstance(v, str) for v in options) or all(isinstance(v, int) for v in options)
        ):
            raise InvalidInput(
                f"payload filter {key!r}: match a string or an integer, or a list of only "
                "strings or only integers",
                details={"key": key},
            )
        match = qe.MatchAny(any=options) if several else qe.MatchValue(value=value)
        conditions.append(qe.FieldCondition(key=key, match=match))
    return qe.Filter(must=conditions)
