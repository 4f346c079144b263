"""The embedded engine: Qdrant Edge (`qdrant-edge-py`), Qdrant's own Rust segment engine in
this process — HNSW, payload indexes (is_tenant), filters — one shard folder per collection.

Measured against qdrant-client's local mode in ADR 0012. What to know (qdrant-edge 0.9.0):
- one opener per folder: this store takes a lock on the root folder first, so a second
  process is refused at once with the holder named (shared.vectors.folder_owner);
- a call holds the GIL for its whole length: keep calls small (per-user reads and writes);
  nothing here runs `optimize()`, which would stall every thread of the process;
- a boolean payload value cannot be matched (True is read as 1): such filters are refused;
- a damaged shard may load with an error, a panic, silently fewer points, or by aborting
  the process (a garbage id-tracker file asks for a 100 GB allocation): `_load` turns what
  it can find into DamagedCollection, which `tiermem reindex` repairs from SQL.

This module is the adapter; the open shards are `edge_shards`, what makes one damaged
`edge_damage`, a shard's config `edge_spec`, compaction `edge_compaction`.
"""

from __future__ import annotations

import fcntl
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Literal

import qdrant_edge as qe

from shared.errors import InvalidInput, PermanentError, Unavailable
from shared.vectors.base import (
    DENSE,
    SPARSE,
    CheckedPoint,
    CollectionState,
    HybridHits,
    PayloadFilter,
    Placement,
    SparseVector,
    Vector,
    VectorHit,
    VectorPoint,
    as_floats,
    canonical_id,
    check_query_dim,
    checked_points,
    dense_dim,
    filter_terms,
    fitted,
    hybrid_query,
    ordered_hits,
)
from shared.vectors.edge_compaction import compact, finish_compactions
from shared.vectors.edge_shards import ShardCache
from shared.vectors.edge_spec import ShardSpec
from shared.vectors.folder_owner import clear_owner, describe_holder, write_owner

ROOT_LOCK = ".tiermem-edge.lock"
MAX_OPEN_SHARDS = 64


class EdgeVectorStore:
    """The VectorStore protocol over Qdrant Edge shards under one folder."""

    def __init__(
        self, *, path: str, placement: Placement = "disk", max_open_shards: int = MAX_OPEN_SHARDS
    ) -> None:
        self._path = Path(path).resolve()
        self._path.mkdir(parents=True, exist_ok=True)
        self._lock_file = self._take_folder()
        write_owner(self._path)
        self._shards = ShardCache(self._path, placement, max_open_shards)
        finish_compactions(self._path)

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

    def ensure_collection(
        self,
        collection: str,
        dim: int,
        *,
        tenant_field: str | None = None,
        sparse: bool = False,
        keyword_fields: Sequence[str] = (),
    ) -> None:
        if dim <= 0:
            raise InvalidInput(f"vector dimension must be positive, got {dim}")
        made = self._shards.made(collection)
        if made is None:
            indexes = [(f, qe.KeywordIndexParams()) for f in keyword_fields]
            if tenant_field is not None:
                indexes.insert(0, (tenant_field, qe.KeywordIndexParams(is_tenant=True)))
            wanted = ShardSpec(dim=dim, shared=tenant_field is not None, sparse=sparse)
            with self._shards.lock:
                made = self._shards.made(collection) or self._shards.create(
                    collection, wanted, indexes
                )
        if made.dim != dim:
            raise PermanentError(
                f"vector collection {collection} holds {made.dim}-dimension vectors but got "
                f"{dim}; was the embedding model changed? Rebuild vectors with `tiermem reindex`.",
                details={"collection": collection, "expected_dim": made.dim, "got_dim": dim},
            )

    def has_sparse(self, collection: str) -> bool | None:
        return self._shards.has_sparse(collection)

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        checked = checked_points(points, collection)
        dim = dense_dim(checked)
        sparse = any(p.sparse is not None for p in checked)

        def write(shard: qe.EdgeShard, made: ShardSpec) -> bool:
            structs = [_edge_point(p, made) for p in fitted(checked, sparse=made.sparse)]
            if structs:
                shard.update(qe.UpdateOperation.upsert_points(structs))
            return True

        for _ in range(2):  # a collection dropped between ensure and write is made again
            if dim is not None:
                self.ensure_collection(collection, dim, sparse=sparse)
            if self._shards.call(collection, write, missing=False):
                return
            if dim is None:
                raise InvalidInput(
                    f"vector collection {collection} does not exist, and points without a "
                    "dense vector cannot say its dimension: ensure_collection first",
                    details={"collection": collection},
                )

    def delete(
        self, collection: str, ids: Sequence[str], *, payload_filter: PayloadFilter | None = None
    ) -> None:
        if not ids:
            return
        canonical: list[Any] = [canonical_id(i) for i in ids]
        if payload_filter:
            scoped = _to_filter(payload_filter, has_ids=canonical)
            op = qe.UpdateOperation.delete_points_by_filter(scoped)
        else:
            op = qe.UpdateOperation.delete_points(canonical)
        self._shards.call(collection, lambda shard, _: shard.update(op), missing=None)

    def delete_where(self, collection: str, payload_filter: PayloadFilter) -> None:
        if not payload_filter:
            raise InvalidInput("delete_where needs a filter; drop_collection removes everything")
        op = qe.UpdateOperation.delete_points_by_filter(_to_filter(payload_filter))
        self._shards.call(collection, lambda shard, _: shard.update(op), missing=None)

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

        def nearest(shard: qe.EdgeShard, made: ShardSpec) -> list[Any]:
            check_query_dim(query, made.dim, collection)
            request = qe.QueryRequest(
                query=qe.Query.Nearest(query, using=DENSE if made.sparse else None),
                limit=limit,
                filter=where,
                with_payload=True,
                score_threshold=score_threshold,
            )
            return shard.query(request)

        found: list[Any] = self._shards.call(collection, nearest, missing=[])
        return [
            VectorHit(id=str(h.id), score=float(h.score), payload=h.payload or {}) for h in found
        ]

    def hybrid_search(
        self,
        collection: str,
        dense: Vector,
        sparse: SparseVector | None,
        *,
        limit: int,
        payload_filter: PayloadFilter | None = None,
        exclude: PayloadFilter | None = None,
    ) -> HybridHits | None:
        query, terms = hybrid_query(dense, sparse)
        # IDF over the points the filter selects (one user's in a shared shard), not every
        # tenant's: their words would set the weights of this user's (ADR 0013).
        corpus = _to_filter(payload_filter) if payload_filter else None
        idf = qe.SearchParams(idf=qe.IdfParams(corpus=corpus)) if corpus else None
        words = qe.SparseVector(terms.indices, terms.values) if terms is not None else None

        def requests(size: int, ids: Sequence[str] = ()) -> list[qe.QueryRequest]:
            where = _to_filter(payload_filter or {}, has_ids=ids, exclude=exclude)
            batch = [
                qe.QueryRequest(size, query=qe.Query.Nearest(query, using=DENSE), filter=where)
            ]
            if words is not None:
                nearest = qe.Query.Nearest(words, using=SPARSE)
                batch.append(qe.QueryRequest(size, query=nearest, filter=where, params=idf))
            return batch

        def both(shard: qe.EdgeShard, made: ShardSpec) -> HybridHits | None:
            if not made.sparse:
                return None
            check_query_dim(query, made.dim, collection)
            if limit <= 0:
                return HybridHits([], [])
            # One planned batch: the two searches share a pass over the segments, and cost
            # what one RRF-fused query does (ADR 0013, "Wired").
            found = shard.query_batch(qe.QueryBatchRequest(requests(limit)))
            by_meaning, by_words = _scored(found[0]), _scored(found[1]) if words else []
            ids = list(dict.fromkeys(h.id for h in [*by_meaning, *by_words]))
            if not ids:
                return HybridHits([], [])
            # Then every candidate by both (ADR 0014): a few dozen points, found by id.
            again = shard.query_batch(qe.QueryBatchRequest(requests(len(ids), ids)))
            return HybridHits(
                by_meaning,
                by_words,
                dense_scores={str(p.id): float(p.score) for p in again[0]},
                sparse_scores={str(p.id): float(p.score) for p in again[1]} if words else {},
            )

        result: HybridHits | None = self._shards.call(collection, both, missing=None)
        return result

    def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[VectorHit]:
        wanted: list[Any] = list(dict.fromkeys(canonical_id(i) for i in ids))
        if not wanted:
            return []
        records: list[Any] = self._shards.call(
            collection, lambda shard, _: shard.retrieve(wanted, True, with_vectors), missing=[]
        )
        return ordered_hits(wanted, records, with_vectors=with_vectors)

    def count(self, collection: str, *, payload_filter: PayloadFilter | None = None) -> int:
        request = qe.CountRequest(filter=_to_filter(payload_filter) if payload_filter else None)
        return int(self._shards.call(collection, lambda shard, _: shard.count(request), missing=0))

    @property
    def reclaims_deleted(self) -> str:
        return (
            "at the next `tiermem compact` (run while serve is stopped: the embedded engine "
            "has no background vacuum); no search returns the points meanwhile"
        )

    def compact(self, collection: str) -> bool:
        return compact(self._shards, collection)

    def describe(self, collection: str) -> CollectionState | None:
        info: Any = self._shards.call(collection, lambda shard, _: shard.info(), missing=None)
        if info is None:
            return None
        return CollectionState(
            points=info.points_count,
            segments=info.segments_count,
            indexed_vectors=info.indexed_vectors_count,
            optimizer="none",  # nothing here runs optimize() (see the module's docstring)
        )

    def drop_collection(self, collection: str) -> None:
        self._shards.drop(collection)

    def list_collections(self) -> list[str]:
        return self._shards.names()

    def close(self) -> None:
        with self._shards.lock:
            if self._shards.closed:
                return
            try:
                self._shards.close()
            finally:
                clear_owner(self._path)  # while the folder is still ours
                self._lock_file.close()  # releases the folder lock


def _scored(points: Sequence[Any]) -> list[VectorHit]:
    return [VectorHit(id=str(p.id), score=float(p.score), payload={}) for p in points]


def _edge_point(point: CheckedPoint, made: ShardSpec) -> qe.Point:
    if not made.sparse:
        assert point.dense is not None  # fitted() keeps only points with one
        return qe.Point(point.id, point.dense, point.payload)
    named: dict[str, Any] = {}
    if point.dense is not None:
        named[DENSE] = point.dense
    if point.sparse is not None:
        named[SPARSE] = qe.SparseVector(point.sparse.indices, point.sparse.values)
    return qe.Point(point.id, named, point.payload)


def _to_filter(
    payload_filter: PayloadFilter,
    *,
    has_ids: Sequence[str] = (),
    exclude: PayloadFilter | None = None,
) -> qe.Filter:
    conditions: list[Any] = [qe.HasIdCondition(point_ids=set(has_ids))] if has_ids else []
    conditions += _conditions(payload_filter)
    return qe.Filter(must=conditions, must_not=_conditions(exclude) if exclude else None)


def _conditions(payload_filter: PayloadFilter) -> list[Any]:
    conditions: list[Any] = []
    for key, value, several in filter_terms(payload_filter, booleans=False):
        match = qe.MatchAny(any=value) if several else qe.MatchValue(value=value)
        conditions.append(qe.FieldCondition(key=key, match=match))
    return conditions
