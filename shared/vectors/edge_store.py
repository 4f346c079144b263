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
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

import qdrant_edge as qe

from shared.errors import DamagedCollection, DomainError, InvalidInput, PermanentError, Unavailable
from shared.vectors.base import (
    DENSE,
    SHARED_HNSW,
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
from shared.vectors.folder_owner import clear_owner, describe_holder, write_owner

logger = logging.getLogger(__name__)

SHARD_CONFIG = "edge_config.json"  # Edge writes it in every shard folder, before any segment
ROOT_LOCK = ".tiermem-edge.lock"
# In a shard folder: present while this store loads the shard (left behind, the last load
# never returned); and the number of points it held when it was last closed cleanly.
LOADING = ".tiermem-loading"
CLOSED_WITH = ".tiermem-closed.json"
MAX_OPEN_SHARDS = 64
PROBE_TIMEOUT_S = 300.0
_NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")
_COMPACTING, _COMPACTED = ".compacting-", ".compacted-"  # a compaction's folders, by stage
T = TypeVar("T")
# "disk": RSS grows with the users searched, not the users stored; "ram": about 1 ms faster
# a search, RSS grows with every vector (ADR 0012).
_PLACEMENT: dict[Placement, str] = {"disk": "cold", "ram": "pinned"}  # vectors and payloads
_MEMORY = {"cold": qe.Memory.Cold, "pinned": qe.Memory.Pinned}
_DATATYPES = {
    "float32": qe.VectorStorageDatatype.Float32,
    "float16": qe.VectorStorageDatatype.Float16,
}


class EdgeVectorStore:
    """The VectorStore protocol over Qdrant Edge shards under one folder."""

    def __init__(
        self, *, path: str, placement: Placement = "disk", max_open_shards: int = MAX_OPEN_SHARDS
    ) -> None:
        self._path = Path(path).resolve()
        self._placement = placement
        self._path.mkdir(parents=True, exist_ok=True)
        self._lock_file = self._take_folder()
        write_owner(self._path)
        self._lock = threading.RLock()  # guards the table of open shards, not engine calls
        # collection → open shard, least recently used first: with per_user, every user has
        # shards, and each open one holds files and maps.
        self._open: OrderedDict[str, _Shard] = OrderedDict()
        self._max_open = max_open_shards
        # Shards whose load killed a process: found once by a child process, not again.
        self._damaged: dict[str, DamagedCollection] = {}
        self._closed = False
        self._told_placement = False
        _finish_compactions(self._path)

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

    def _entry(self, collection: str) -> _Shard | None:
        """The open shard, loaded on first use; None: no such collection."""
        folder = self._folder(collection)
        with self._lock:
            self._check_open()
            entry = self._open.get(collection)
            if entry is not None:
                self._open.move_to_end(collection)
                return entry
            if collection in self._damaged:
                raise self._damaged[collection]
            made = _read_spec(collection, folder)
            if made is None:
                return None  # none, or one that never finished being created
            return self._keep(collection, self._load(collection, folder, made))

    def _load(self, collection: str, folder: Path, made: ShardSpec) -> _Shard:
        """Open a shard, refusing one found damaged with DamagedCollection (lock held)."""
        marker = folder / LOADING
        if marker.exists():
            # The last load never returned: its process died in it. A damaged shard can
            # abort the process that loads it, so a child process loads it first.
            failure = _load_in_child(folder)
            if failure is not None:
                reason = "loading it ended the process that tried"
                self._damaged[collection] = _damaged(collection, folder, reason, failure)
                raise self._damaged[collection]
        if not (made.made_as_today(self._placement) or self._told_placement):
            # The engine keeps each segment where it was made: only a rebuild moves it.
            self._told_placement = True
            logger.warning(
                "vector shards made with another placement or datatype than "
                "TIERMEM_QDRANT__VECTOR_MEMORY=%s (e.g. %s); `tiermem compact` rebuilds them",
                self._placement,
                collection,
            )
        marker.touch()
        try:
            shard = _unpanicked(lambda: qe.EdgeShard.load(str(folder)))
        except Exception as exc:
            raise _damaged(collection, folder, "the engine cannot load it", exc) from exc
        finally:
            marker.unlink(missing_ok=True)
        doubt = _doubt(shard, folder)
        if doubt is not None:
            _close_quietly(shard)
            raise _damaged(collection, folder, *doubt)
        _forget_points(folder)  # it changes from here on; a clean close records it again
        return _Shard(shard, made, folder)

    def _keep(self, collection: str, entry: _Shard) -> _Shard:
        """Hold a shard open (lock held), closing the least recently used past the limit."""
        self._open[collection] = entry
        while len(self._open) > self._max_open:
            _, oldest = self._open.popitem(last=False)
            oldest.close()
        return entry

    def _call(self, collection: str, fn: Callable[[qe.EdgeShard, ShardSpec], T], missing: T) -> T:
        """fn(shard, what it was made with) on the collection's shard; `missing` when there is
        none. A shard closed under the call (dropped, or closed past the open limit) is looked
        up once more."""
        for attempt in (1, 2):
            entry = self._entry(collection)
            if entry is None:
                return missing
            try:
                with entry.in_use():
                    return _unpanicked(partial(fn, entry.shard, entry.made))
            except DomainError:
                raise
            except _ShardClosed:
                if attempt == 1:
                    continue
                raise Unavailable(
                    f"vector collection {collection} was closed twice under one call; retry",
                    details={"collection": collection},
                ) from None
            except Exception as exc:  # the engine raises plain Exception, told apart by text
                raise _engine_error(collection, entry.folder, exc) from exc
        return missing

    def _made(self, collection: str) -> ShardSpec | None:
        entry = self._entry(collection)
        return None if entry is None else entry.made

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
        made = self._made(collection)
        if made is None:
            indexes = [(f, qe.KeywordIndexParams()) for f in keyword_fields]
            if tenant_field is not None:
                indexes.insert(0, (tenant_field, qe.KeywordIndexParams(is_tenant=True)))
            wanted = ShardSpec(dim=dim, shared=tenant_field is not None, sparse=sparse)
            with self._lock:
                made = self._made(collection) or self._create(collection, wanted, indexes)
        if made.dim != dim:
            raise PermanentError(
                f"vector collection {collection} holds {made.dim}-dimension vectors but got "
                f"{dim}; was the embedding model changed? Rebuild vectors with `tiermem reindex`.",
                details={"collection": collection, "expected_dim": made.dim, "got_dim": dim},
            )

    def _create(
        self, collection: str, made: ShardSpec, indexes: Sequence[tuple[str, Any]]
    ) -> ShardSpec:
        """A new shard with its payload indexes (lock held)."""
        folder = self._folder(collection)
        if folder.exists():  # a shard that never finished being created: start it afresh
            shutil.rmtree(folder)
        config = made.config(self._placement)
        shard = _engine(collection, folder, lambda: qe.EdgeShard.create(str(folder), config))
        try:
            for field, params in indexes:
                op = qe.UpdateOperation.create_field_index(field, params)
                _engine(collection, folder, partial(shard.update, op))
        except Exception:
            _close_quietly(shard)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self._keep(collection, _Shard(shard, made, folder))
        logger.info(
            "created vector collection",
            extra={"collection": collection, "dim": made.dim, "sparse": made.sparse},
        )
        return made

    def has_sparse(self, collection: str) -> bool | None:
        folder = self._folder(collection)
        with self._lock:
            entry = self._open.get(collection)
            if entry is not None:
                return entry.made.sparse
            if collection in self._damaged:
                raise self._damaged[collection]
        made = _read_spec(collection, folder)  # the config alone: no shard opened for this
        return None if made is None else made.sparse

    # -- VectorStore ------------------------------------------------------------------------

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
            if self._call(collection, write, missing=False):
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
        self._call(collection, lambda shard, _: shard.update(op), missing=None)

    def delete_where(self, collection: str, payload_filter: PayloadFilter) -> None:
        if not payload_filter:
            raise InvalidInput("delete_where needs a filter; drop_collection removes everything")
        op = qe.UpdateOperation.delete_points_by_filter(_to_filter(payload_filter))
        self._call(collection, lambda shard, _: shard.update(op), missing=None)

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

        found: list[Any] = self._call(collection, nearest, missing=[])
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

        result: HybridHits | None = self._call(collection, both, missing=None)
        return result

    def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[VectorHit]:
        wanted: list[Any] = list(dict.fromkeys(canonical_id(i) for i in ids))
        if not wanted:
            return []
        records: list[Any] = self._call(
            collection, lambda shard, _: shard.retrieve(wanted, True, with_vectors), missing=[]
        )
        return ordered_hits(wanted, records, with_vectors=with_vectors)

    def count(self, collection: str, *, payload_filter: PayloadFilter | None = None) -> int:
        request = qe.CountRequest(filter=_to_filter(payload_filter) if payload_filter else None)
        return int(self._call(collection, lambda shard, _: shard.count(request), missing=0))

    @property
    def reclaims_deleted(self) -> str:
        return (
            "at the next `tiermem compact` (run while serve is stopped: the embedded engine "
            "has no background vacuum); no search returns the points meanwhile"
        )

    def compact(self, collection: str) -> bool:
        """Copy the live points into a new shard made as new shards are today (datatype,
        placement) and swap it in, so nothing of a deleted point stays on disk (the engine's
        own vacuum leaves it in the write-ahead log). The caller must own the store alone:
        a write meanwhile would land in the old shard."""
        folder = self._folder(collection)
        with self._lock:
            entry = self._entry(collection)
            if entry is None:
                return False
            old, made = entry.shard, entry.made
            rebuilt = ShardSpec(dim=made.dim, shared=made.shared, sparse=made.sparse)
            fresh_folder = self._path / f"{_COMPACTING}{collection}"
            shutil.rmtree(fresh_folder, ignore_errors=True)
            try:
                fresh = _engine(
                    collection,
                    fresh_folder,
                    lambda: qe.EdgeShard.create(str(fresh_folder), rebuilt.config(self._placement)),
                )
                try:
                    _engine(collection, folder, lambda: _copy_live_points(old, fresh))
                finally:
                    _close_quietly(fresh)
                _check_copy(old, fresh_folder, collection)
            except BaseException:
                shutil.rmtree(fresh_folder, ignore_errors=True)
                raise
            self._open.pop(collection, None)
            entry.close(record=False)  # its folder goes to the trash
            # Swapped by two renames; a crash between them is finished when the folder is
            # next opened (_finish_compactions): the copy was complete before the first.
            trash = self._path / f"{_COMPACTED}{collection}"
            shutil.rmtree(trash, ignore_errors=True)
            folder.rename(trash)
            fresh_folder.rename(folder)
            shutil.rmtree(trash)
        return True

    def describe(self, collection: str) -> CollectionState | None:
        info: Any = self._call(collection, lambda shard, _: shard.info(), missing=None)
        if info is None:
            return None
        return CollectionState(
            points=info.points_count,
            segments=info.segments_count,
            indexed_vectors=info.indexed_vectors_count,
            optimizer="none",  # nothing here runs optimize() (see the module's docstring)
        )

    def drop_collection(self, collection: str) -> None:
        folder = self._folder(collection)
        with self._lock:
            entry = self._open.pop(collection, None)
            if entry is not None:
                entry.close(record=False)
            self._damaged.pop(collection, None)
            if folder.exists():
                shutil.rmtree(folder)
                logger.info("dropped vector collection", extra={"collection": collection})

    def list_collections(self) -> list[str]:
        # A folder with segments and no config is a damaged collection, listed so that it
        # can be dropped; one with neither never finished being created.
        shards = {p.parent.name for p in self._path.glob(f"*/{SHARD_CONFIG}")}
        shards.update(p.parent.parent.name for p in self._path.glob("*/segments/*"))
        return sorted(name for name in shards if _NAME.fullmatch(name))  # not a compaction's

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                for entry in self._open.values():
                    entry.close()
                self._open.clear()
            finally:
                clear_owner(self._path)  # while the folder is still ours
                self._lock_file.close()  # releases the folder lock

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the vector store is closed")


class _ShardClosed(Exception):
    """A call reached a shard being closed: the caller looks the collection up again."""


class _EnginePanic(Exception):
    """A Rust panic in the engine: the shard's files broke the engine's own assumptions."""


class _Shard:
    """An open shard, what it was made with, and the calls under way in it: closing waits
    for them, so that no call meets a closing shard and the points it records are all there
    are."""

    def __init__(self, shard: qe.EdgeShard, made: ShardSpec, folder: Path) -> None:
        self.shard, self.made, self.folder = shard, made, folder
        self._calls = 0
        self._closing = False
        self._idle = threading.Condition()

    @contextmanager
    def in_use(self) -> Iterator[None]:
        with self._idle:
            if self._closing:
                raise _ShardClosed
            self._calls += 1
        try:
            yield
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def close(self, *, record: bool = True) -> None:
        """Flushed first: a shard closed to make room, or at shutdown, keeps every write;
        `record`: its number of points is kept beside it for the next load to check."""
        with self._idle:
            self._closing = True
            self._idle.wait_for(lambda: self._calls == 0)
        points = None
        if record:
            try:
                points = int(_unpanicked(lambda: self.shard.count(qe.CountRequest())))
            except Exception:
                logger.warning("counting the vector shard in %s failed", self.folder, exc_info=True)
        if _close_quietly(self.shard) and points is not None:
            _record_points(self.folder, points)


def _close_quietly(shard: qe.EdgeShard) -> bool:
    """Flush and close; False (logged) when either failed."""
    closed = True
    for step in (shard.flush, shard.close):
        try:
            _unpanicked(step)
        except Exception:
            logger.warning("closing a vector shard failed", exc_info=True)
            closed = False
    return closed


def _finish_compactions(root: Path) -> None:
    """What a compaction killed mid-way left: a copy is complete once the old shard was
    moved aside (`.compacted-`), so it takes the collection's name; any other copy is
    unfinished and goes."""
    for trash in root.glob(f"{_COMPACTED}*"):
        name = trash.name.removeprefix(_COMPACTED)
        fresh = root / f"{_COMPACTING}{name}"
        if not (root / name).exists() and fresh.is_dir():
            fresh.rename(root / name)
            logger.warning("finished an interrupted compaction", extra={"collection": name})
        shutil.rmtree(trash, ignore_errors=True)
    for fresh in root.glob(f"{_COMPACTING}*"):
        shutil.rmtree(fresh, ignore_errors=True)


def _read_spec(collection: str, folder: Path) -> ShardSpec | None:
    """What the collection's shard was made with, from its config alone; None: no such
    collection (or one that never finished being created); DamagedCollection when segments
    are there without a readable config."""
    if not (folder / SHARD_CONFIG).exists():
        if any((folder / "segments").glob("*")):
            raise _damaged(collection, folder, "its edge_config.json is missing")
        return None
    try:
        return ShardSpec.read(folder)
    except (OSError, ValueError, AttributeError) as exc:  # cut short, or not JSON
        raise _damaged(collection, folder, "its edge_config.json is unreadable", exc) from exc


def _check_copy(old: qe.EdgeShard, fresh_folder: Path, collection: str) -> None:
    """The copy, reopened from disk, holds every live point of the old shard."""
    copy = _engine(collection, fresh_folder, lambda: qe.EdgeShard.load(str(fresh_folder)))
    try:
        have, want = copy.info().points_count, old.info().points_count
    finally:
        _close_quietly(copy)
    if have != want:
        raise Unavailable(
            f"compacting vector collection {collection} copied {have} of {want} points; "
            "the collection is left as it was",
            details={"collection": collection},
        )


def _copy_live_points(old: qe.EdgeShard, fresh: qe.EdgeShard) -> None:
    """Payload indexes first (the tenant index co-locates a user's points), then the points."""
    for field, index in old.info().payload_schema.items():
        fresh.update(qe.UpdateOperation.create_field_index(field, index.params or index.data_type))
    offset = None
    while True:
        request = qe.ScrollRequest(offset=offset, limit=1_000, with_payload=True, with_vector=True)
        records, offset = old.scroll(request)
        points = [qe.Point(r.id, r.vector, r.payload or {}) for r in records if r.vector]
        if points:
            fresh.update(qe.UpdateOperation.upsert_points(points))
        if offset is None:
            return


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


def _unpanicked(fn: Callable[[], T]) -> T:
    """fn(), a Rust panic raised as _EnginePanic: pyo3 raises it as PanicException, which
    derives from BaseException, so `except Exception` would let it through (a 500)."""
    try:
        return fn()
    except BaseException as exc:
        if type(exc).__name__ == "PanicException":
            raise _EnginePanic(str(exc)) from exc
        raise


def _engine(collection: str, folder: Path, fn: Callable[[], T]) -> T:
    try:
        return _unpanicked(fn)
    except Exception as exc:
        raise _engine_error(collection, folder, exc) from exc


def _engine_error(collection: str, folder: Path, exc: Exception) -> DomainError:
    """qdrant-edge raises plain Exception: a wrong dimension is the caller's; a panic says
    the shard is damaged; anything else (disk, I/O, damage the engine reports as an error)
    is a 503 in the API and a retry in a worker."""
    text = str(exc)
    if "dimension error" in text:
        return InvalidInput(text, details={"collection": collection})
    if isinstance(exc, _EnginePanic):
        return _damaged(collection, folder, "the engine panicked reading it", exc)
    return Unavailable(
        f"the embedded vector engine failed on collection {collection}: {text[:300]} "
        "(if a shard is damaged, `tiermem reindex` rebuilds it from SQL)",
        details={"collection": collection},
    )


def _damaged(collection: str, folder: Path, reason: str, cause: object = None) -> DamagedCollection:
    """The error for a shard that cannot be trusted; the engine's own words go to the log
    (with the folder), not to API clients."""
    logger.error(
        "vector collection %s (%s) is damaged: %s%s",
        collection,
        folder,
        reason,
        f": {str(cause)[:500]}" if cause is not None else "",
        extra={"collection": collection},
    )
    return DamagedCollection(
        f"vector collection {collection} is damaged ({reason}): it cannot be searched or "
        "written until `tiermem reindex` drops it and rebuilds it from SQL, which holds every "
        "fact and message (stop the process holding the vector folder first)",
        details={"collection": collection},
    )


def _doubt(shard: qe.EdgeShard, folder: Path) -> tuple[str, object] | None:
    """Why a shard that loaded cannot be trusted, if it cannot: points missing since its
    last clean close (a segment the engine skipped, a truncated id tracker load silently),
    or a first point that cannot be read (vectors or payloads cut short)."""
    try:
        recorded = _recorded_points(folder)
        if recorded is not None:
            points = int(_unpanicked(lambda: shard.count(qe.CountRequest())))
            if points != recorded:
                return f"it holds {points} points but held {recorded} when last closed", None
        first = qe.ScrollRequest(limit=1, with_payload=True, with_vector=True)
        _unpanicked(lambda: shard.scroll(first))
    except Exception as exc:
        return "its points cannot be read", exc
    return None


def _recorded_points(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / CLOSED_WITH).read_text(encoding="utf-8"))["points"])
    except (OSError, ValueError, KeyError, TypeError):  # none, or cut short by a power loss
        return None


def _record_points(folder: Path, points: int) -> None:
    scratch = folder / f"{CLOSED_WITH}.tmp"
    scratch.write_text(json.dumps({"points": points}), encoding="utf-8")
    os.replace(scratch, folder / CLOSED_WITH)


def _forget_points(folder: Path) -> None:
    """Remove the close record for good (synced): one that came back after a power loss
    would make the shard, grown since, look damaged."""
    record = folder / CLOSED_WITH
    if not record.exists():
        return
    record.unlink()
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


# A child process loads the shard under an address-space limit: the garbage that makes the
# engine ask for tens of gigabytes fails there at once, wherever the machine has them.
_LOAD_IN_CHILD = """
import resource, sys
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import qdrant_edge as qe
shard = qe.EdgeShard.load(sys.argv[1])
shard.scroll(qe.ScrollRequest(limit=1, with_payload=True, with_vector=True))
shard.close()
"""


def _load_in_child(folder: Path) -> str | None:
    """Why loading the shard fails in a child process (its last words), or None."""
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    limit = 4 * 2**30 + 4 * size  # the engine maps its files; Python and threads need room
    try:
        child = subprocess.run(
            [sys.executable, "-c", _LOAD_IN_CHILD, str(folder), str(limit)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"a load in a child process took over {PROBE_TIMEOUT_S:g} s"
    if child.returncode == 0:
        return None
    words = child.stderr.strip().splitlines() or [f"exit status {child.returncode}"]
    # a Rust abort says why first (then a backtrace); a Python traceback says it last
    return words[0] if child.returncode < 0 else words[-1]


@dataclass(frozen=True)
class ShardSpec:
    """What a shard is made with (`config`), or was, as its config file records it (`read`)."""

    dim: int
    shared: bool  # by many users (partitioned layout): graphs per user, none global
    # Named vectors DENSE and SPARSE (BM25, IDF by the engine): message collections since
    # ADR 0013. Without: one unnamed vector (facts; messages of an earlier tiermem).
    sparse: bool = False
    datatype: str = "float16"  # half the disk and RAM of float32; recall@10 0.9996 (ADR 0012)
    memory: str | None = None
    payload_memory: str | None = None
    sparse_memory: str | None = None

    @classmethod
    def read(cls, folder: Path) -> ShardSpec:
        config = json.loads((folder / SHARD_CONFIG).read_text(encoding="utf-8"))
        vectors = config.get("vectors", {})
        sparse = config.get("sparse_vectors") or {}
        named = isinstance(vectors, dict) and DENSE in vectors and SPARSE in sparse
        if named:
            params = vectors[DENSE]
        else:
            params = vectors.get("") if isinstance(vectors, dict) and "" in vectors else vectors
        if (
            not isinstance(params, dict)
            or params.get("distance") != "Cosine"
            or "size" not in params
        ):
            raise PermanentError(
                f"vector folder {folder} was not created by tiermem (expected one unnamed "
                f"cosine vector, or {DENSE!r} and a {SPARSE!r} sparse vector); remove it or "
                "use another TIERMEM_QDRANT__PATH",
                details={"folder": str(folder)},
            )
        return cls(
            dim=int(params["size"]),
            shared="payload_m" in (config.get("hnsw_config") or {}),
            sparse=named,
            datatype=params.get("datatype", "float32"),
            memory=params.get("memory"),
            payload_memory=config.get("payload_memory"),
            sparse_memory=sparse.get(SPARSE, {}).get("memory") if named else None,
        )

    def made_as_today(self, placement: Placement) -> bool:
        """As `config(placement)` makes a shard now (the engine never moves one made
        otherwise: `compact` rebuilds it)."""
        wanted = _PLACEMENT[placement]
        sparse_memory = self.sparse_memory if self.sparse else wanted
        return (self.datatype, self.memory, self.payload_memory, sparse_memory) == (
            ShardSpec(self.dim, self.shared).datatype,
            wanted,
            wanted,
            wanted,
        )

    def config(self, placement: Placement) -> qe.EdgeConfig:
        memory = _MEMORY[_PLACEMENT[placement]]
        params = qe.EdgeVectorParams(
            size=self.dim,
            distance=qe.Distance.Cosine,
            datatype=_DATATYPES[self.datatype],
            memory=memory,
        )
        hnsw = qe.HnswIndexConfig(**SHARED_HNSW) if self.shared else None
        if not self.sparse:
            return qe.EdgeConfig(vectors=params, hnsw_config=hnsw, payload_memory=memory)
        bm25 = qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=memory)
        return qe.EdgeConfig(
            vectors={DENSE: params},
            sparse_vectors={SPARSE: bm25},
            hnsw_config=hnsw,
            payload_memory=memory,
        )


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
