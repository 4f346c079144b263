"""The VectorStore on Qdrant: embedded on disk, embedded in memory, or a Qdrant server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import httpx
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from shared.errors import InvalidInput, PermanentError, Unavailable
from shared.vectors.base import (
    CollectionState,
    PayloadFilter,
    Vector,
    VectorHit,
    VectorPoint,
    as_floats,
    canonical_id,
    check_query_dim,
    filter_terms,
    ordered_hits,
    uniform_vectors,
)
from shared.vectors.exact_index import ExactIndex, supports_filter
from shared.vectors.folder_owner import clear_owner, describe_holder, write_owner

if TYPE_CHECKING:
    from shared.config import Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")
Mode = Literal["server", "embedded", "memory"]

_LOCK_MESSAGE = "is already accessed by another instance"
# Gateway-type statuses mean "the server is not there right now", not "your request is bad".
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
# A collection's status as operators read it (Qdrant: green, yellow, grey, red).
_OPTIMIZER = {
    qm.CollectionStatus.GREEN: "ok",
    qm.CollectionStatus.YELLOW: "optimizing",
    qm.CollectionStatus.GREY: "pending",
    qm.CollectionStatus.RED: "error",
}
# Local modes mirror each searched collection in an ExactIndex (about dim × 4 bytes per
# point, 15 MB for 10k × 384). Above this many points a collection is left to Qdrant's
# own search rather than doubling the process's memory for it.
MAX_INDEXED_POINTS = 200_000
# Below this many points Qdrant's own brute force is about as fast, and building an index
# for a collection searched once (many users, one query each) costs more than it saves
# (bench/results/context.md, scenario c).
MIN_INDEXED_POINTS = 500


class QdrantVectorStore:
    """One QdrantClient chosen once: a server URL, an embedded folder, or in memory.

    Embedded mode is qdrant-client's local mode: brute-force numpy search, one process per
    folder (a file lock), and internal arrays that concurrent writers corrupt. Every call
    on an embedded client therefore runs under one re-entrant lock per store.
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        path: str | None = None,
        in_memory: bool = False,
        api_key: str | None = None,
        max_indexed_points: int = MAX_INDEXED_POINTS,
        min_indexed_points: int = MIN_INDEXED_POINTS,
        embedded_sync: Literal["normal", "full"] = "normal",
    ) -> None:
        chosen = [
            name
            for name, value in (("url", url), ("path", path), ("in_memory", in_memory))
            if value
        ]
        if len(chosen) != 1:
            given = ", ".join(chosen) if chosen else "none"
            raise ValueError(
                f"QdrantVectorStore needs exactly one of url, path or in_memory (given: {given})"
            )
        if api_key is not None and url is None:
            raise ValueError("api_key only applies to a Qdrant server (url)")

        self._url = url
        self._embedded_sync = embedded_sync
        self._max_indexed_points = max_indexed_points
        self._min_indexed_points = min_indexed_points
        self._path = str(Path(path).resolve()) if path else None
        self._mode: Mode = "server" if url else ("embedded" if path else "memory")
        # Server requests are independent HTTP calls; the embedded client shares numpy
        # arrays and an SQLite connection between calls, so it needs serializing.
        self._lock: AbstractContextManager[Any] = nullcontext() if url else threading.RLock()
        # name → dim of collections known to exist, so upsert needs no existence round trip.
        # Plain dict operations are atomic under the GIL; a race only costs a lookup.
        self._known: dict[str, int] = {}
        # Local modes only: collection → in-process exact index, loaded on first search and
        # kept in step by our own writes (this process owns the data). Guarded by _lock.
        self._indexes: dict[str, ExactIndex] = {}
        # Collections too small to index: their point count, an upper bound kept by upserts.
        self._small: dict[str, int] = {}
        self._closed = False
        self._client = self._open_client(api_key)

    def _open_client(self, api_key: str | None) -> QdrantClient:
        if self._url is not None:
            # No compatibility probe: it is network I/O in a constructor, and it only warns.
            return QdrantClient(url=self._url, api_key=api_key, check_compatibility=False)
        if self._path is None:
            # Our lock serializes every call, so SQLite's same-thread check only gets in the
            # way (it is on by default where SQLite is built THREADSAFE=2, e.g. macOS).
            return QdrantClient(location=":memory:", force_disable_check_same_thread=True)
        use_embedded_sync(self._embedded_sync)
        try:
            client = QdrantClient(path=self._path, force_disable_check_same_thread=True)
        except RuntimeError as exc:
            if _LOCK_MESSAGE not in str(exc):
                raise
            holder, owner = describe_holder(self._path)
            raise Unavailable(
                f"The embedded Qdrant folder {self._path} is held by {holder}; embedded "
                "Qdrant allows one process per folder. Stop that process, or run `tiermem "
                "serve` (API and worker in one process), or point TIERMEM_QDRANT__URL at a "
                "Qdrant server.",
                details={"path": self._path, "holder": owner},
            ) from exc
        write_owner(self._path)
        return client

    @classmethod
    def from_settings(cls, settings: Settings) -> QdrantVectorStore:
        q = settings.qdrant
        if q.url:
            return cls(url=q.url, api_key=q.api_key)
        if q.in_memory:
            return cls(in_memory=True)
        path = settings.qdrant_path
        if path is None:  # Settings computes a path whenever url and in_memory are unset
            raise AssertionError("settings.qdrant_path is unset without a url or in_memory")
        Path(path).mkdir(parents=True, exist_ok=True)
        return cls(path=path, embedded_sync=q.embedded_sync)

    @property
    def mode(self) -> Mode:
        return self._mode

    def __repr__(self) -> str:
        target = self._url or self._path or ":memory:"
        return f"QdrantVectorStore(mode={self._mode!r}, target={target!r})"

    def __enter__(self) -> QdrantVectorStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        """Run one client call under the lock, turning "server not reachable" into Unavailable."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            try:
                return fn()
            except ResponseHandlingException as exc:
                if isinstance(exc.source, httpx.TransportError):
                    raise self._unreachable(exc.source) from exc
                raise
            except UnexpectedResponse as exc:
                if exc.status_code in _UNAVAILABLE_STATUSES:
                    raise self._unreachable(exc) from exc
                raise

    def _unreachable(self, cause: BaseException) -> Unavailable:
        return Unavailable(
            f"Cannot reach the Qdrant server at {self._url} ({type(cause).__name__}: {cause}). "
            "Check that it is running and that TIERMEM_QDRANT__URL points at it.",
            details={"url": self._url},
        )

    def _is_missing(self, exc: Exception, collection: str) -> bool:
        """Whether exc means the collection does not exist.

        The server answers 404; local mode raises a bare ValueError, so instead of matching
        its text we ask it (cheap: a dict lookup, under the lock the caller holds).
        """
        if isinstance(exc, UnexpectedResponse):
            return exc.status_code == 404
        if isinstance(exc, ValueError) and self._mode != "server":
            return not self._client.collection_exists(collection)
        return False

    def _existing_dim(self, collection: str) -> int | None:
        with self._lock:
            try:
                info = self._call(lambda: self._client.get_collection(collection))
            except (UnexpectedResponse, ValueError) as exc:
                if self._is_missing(exc, collection):
                    return None
                raise
        params = info.config.params.vectors
        if not isinstance(params, qm.VectorParams) or params.distance != qm.Distance.COSINE:
            raise PermanentError(
                f"Qdrant collection {collection} exists but was not created by tiermem "
                "(expected one unnamed cosine vector); drop it or use another prefix",
                details={"collection": collection},
            )
        return params.size

    # -- VectorStore ------------------------------------------------------------------

    def ensure_collection(
        self, collection: str, dim: int, *, tenant_field: str | None = None
    ) -> None:
        if dim <= 0:
            raise InvalidInput(f"vector dimension must be positive, got {dim}")
        known = self._known.get(collection)
        if known is None:
            with self._lock:
                known = self._existing_dim(collection)
                if known is None:
                    known = self._create(collection, dim, tenant_field)
            self._known[collection] = known
        if known != dim:
            raise PermanentError(
                f"Qdrant collection {collection} holds {known}-dimension vectors but got "
                f"{dim}; was the embedding model changed? Rebuild vectors with `tiermem reindex`.",
                details={"collection": collection, "expected_dim": known, "got_dim": dim},
            )

    def _create(self, collection: str, dim: int, tenant_field: str | None) -> int:
        self._indexes.pop(collection, None)
        self._small.pop(collection, None)
        config = qm.VectorParams(size=dim, distance=qm.Distance.COSINE)
        try:
            self._call(lambda: self._client.create_collection(collection, vectors_config=config))
            if tenant_field is not None and self._mode == "server":
                # Qdrant's multitenancy: the user key as a tenant index keeps each user's
                # points together on disk and makes the filtered search per user fast.
                # (Local mode ignores payload indexes; its search is exact anyway.)
                index = qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
                self._call(
                    lambda: self._client.create_payload_index(
                        collection, field_name=tenant_field, field_schema=index, wait=True
                    )
                )
        except (UnexpectedResponse, ValueError):
            # Another worker thread or process created it between our check and create
            # (the server answers 409, local mode cannot race under our lock): use theirs.
            existing = self._existing_dim(collection)
            if existing is None:
                raise
            return existing
        logger.info("created vector collection", extra={"collection": collection, "dim": dim})
        return dim

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        vectors = uniform_vectors(points, collection)
        dim = len(vectors[0])
        structs = [
            qm.PointStruct(id=canonical_id(p.id), vector=v, payload=p.payload)
            for p, v in zip(points, vectors, strict=True)
        ]
        self.ensure_collection(collection, dim)

        def write() -> None:
            # wait=True: the dedup step searches right after writing and must see the write.
            self._client.upsert(collection, points=structs, wait=True)

        with self._lock:
            try:
                self._call(write)
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
                # Dropped behind our cache's back (delete-user in another process): recreate.
                self._known.pop(collection, None)
                self._indexes.pop(collection, None)
                self._small.pop(collection, None)
                self.ensure_collection(collection, dim)
                self._call(write)
            self._index_written(collection, [str(s.id) for s in structs])
            if collection in self._small:
                self._small[collection] += len(structs)
                if self._small[collection] >= self._min_indexed_points:
                    del self._small[collection]  # the next search counts and indexes it

    def _index_written(self, collection: str, ids: list[str]) -> None:
        """Copy just-written points into the collection's index, if it has one (lock held)."""
        index = self._indexes.get(collection)
        if index is None:
            return
        # Read back what Qdrant stored (its JSON copy of the payload), so both paths agree.
        records = self._call(
            lambda: self._client.retrieve(collection, ids=ids, with_payload=True, with_vectors=True)
        )
        index.upsert(_index_rows(records))
        if len(index) > self._max_indexed_points:
            del self._indexes[collection]

    def delete(
        self, collection: str, ids: Sequence[str], *, payload_filter: PayloadFilter | None = None
    ) -> None:
        if not ids:
            return
        canonical = [canonical_id(i) for i in ids]
        selector: qm.PointIdsList | qm.FilterSelector = qm.PointIdsList(points=list(canonical))
        if payload_filter:
            scoped = _to_filter(payload_filter)
            assert scoped is not None
            scoped.must = [qm.HasIdCondition(has_id=list(canonical)), *(scoped.must or [])]
            selector = qm.FilterSelector(filter=scoped)
        with self._lock:
            try:
                self._call(
                    lambda: self._client.delete(collection, points_selector=selector, wait=True)
                )
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
                self._known.pop(collection, None)
                self._indexes.pop(collection, None)
                self._small.pop(collection, None)
                return
            index = self._indexes.get(collection)
            if index is not None:
                if payload_filter:
                    del self._indexes[collection]  # which ids matched is Qdrant's to say
                else:
                    index.delete(canonical)

    def delete_where(self, collection: str, payload_filter: PayloadFilter) -> None:
        where = _to_filter(payload_filter)
        if where is None:
            raise InvalidInput("delete_where needs a filter; drop_collection removes everything")
        with self._lock:
            try:
                self._call(
                    lambda: self._client.delete(
                        collection, points_selector=qm.FilterSelector(filter=where), wait=True
                    )
                )
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
                self._known.pop(collection, None)
            self._indexes.pop(collection, None)

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
        query_filter = _to_filter(payload_filter)  # validates the filter for both paths
        with self._lock:
            index = self._index_for(collection) if supports_filter(payload_filter) else None
            if index is not None:
                check_query_dim(query, index.dim, collection)
                return index.search(
                    query,
                    limit=limit,
                    score_threshold=score_threshold,
                    payload_filter=payload_filter,
                )
            try:
                response = self._call(
                    lambda: self._client.query_points(
                        collection,
                        query=query,
                        limit=limit,
                        score_threshold=score_threshold,
                        query_filter=query_filter,
                        with_payload=True,
                        with_vectors=False,
                    )
                )
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
                self._known.pop(collection, None)
                return []
        return [
            VectorHit(id=str(p.id), score=float(p.score), payload=p.payload or {})
            for p in response.points
        ]

    def _index_for(self, collection: str) -> ExactIndex | None:
        """The collection's exact index, loading it on first use (lock held).

        None in server mode, for a missing collection, and above max_indexed_points.
        """
        if self._mode == "server":
            return None
        index = self._indexes.get(collection)
        if index is not None:
            return index
        if collection in self._small:
            return None
        try:
            dim = self._existing_dim(collection)
            if dim is None:
                return None
            size = self._call(lambda: self._client.count(collection, exact=True)).count
            if size < self._min_indexed_points:
                self._small[collection] = size
                return None
            if size > self._max_indexed_points:
                return None
            index = ExactIndex(dim)
            offset: Any = None
            while True:
                records, offset = self._call(
                    lambda start=offset: self._client.scroll(  # type: ignore[misc]
                        collection,
                        limit=10_000,
                        offset=start,
                        with_payload=True,
                        with_vectors=True,
                    )
                )
                index.upsert(_index_rows(records))
                if offset is None:
                    break
        except PermanentError:
            return None  # not a tiermem collection: let the Qdrant path answer as before
        self._indexes[collection] = index
        return index

    def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[VectorHit]:
        wanted = list(dict.fromkeys(canonical_id(i) for i in ids))  # dedupe, keep order
        if not wanted:
            return []
        with self._lock:
            try:
                records = self._call(
                    lambda: self._client.retrieve(
                        collection, ids=wanted, with_payload=True, with_vectors=with_vectors
                    )
                )
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
                self._known.pop(collection, None)
                return []
        return ordered_hits(wanted, records, with_vectors=with_vectors)

    def count(self, collection: str, *, payload_filter: PayloadFilter | None = None) -> int:
        where = _to_filter(payload_filter)
        with self._lock:
            try:
                result = self._call(
                    lambda: self._client.count(collection, count_filter=where, exact=True)
                )
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
                self._known.pop(collection, None)
                return 0
        return result.count

    @property
    def reclaims_deleted(self) -> str:
        if self.mode == "server":
            return (
                "when the server's vacuum optimizer rewrites the segment (by Qdrant's default "
                "once 20 % of its points are deleted); no search returns the points meanwhile"
            )
        return "when this process exits (vectors held in memory)"

    def compact(self, collection: str) -> bool:
        return False  # a server vacuums by itself; memory mode frees on exit

    def describe(self, collection: str) -> CollectionState | None:
        with self._lock:
            try:
                info = self._call(lambda: self._client.get_collection(collection))
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
                return None
        failed = getattr(info.optimizer_status, "error", None)
        return CollectionState(
            points=info.points_count or 0,
            segments=info.segments_count,
            indexed_vectors=info.indexed_vectors_count or 0,
            optimizer=f"error: {failed}" if failed else _OPTIMIZER[info.status],
        )

    def drop_collection(self, collection: str) -> None:
        with self._lock:
            self._known.pop(collection, None)
            self._indexes.pop(collection, None)
            self._small.pop(collection, None)
            try:
                self._call(lambda: self._client.delete_collection(collection))
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
        logger.info("dropped vector collection", extra={"collection": collection})

    def list_collections(self) -> list[str]:
        response = self._call(self._client.get_collections)
        return sorted(c.name for c in response.collections)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._known.clear()
            self._indexes.clear()
            self._small.clear()
            if self._path is not None:
                clear_owner(self._path)  # while the lock is still ours: no later owner's
            # Releases the embedded folder lock, so another process (or store) may open it.
            self._client.close()


def _index_rows(
    records: Sequence[qm.Record],
) -> Iterator[tuple[str, Sequence[float], dict[str, Any]]]:
    for r in records:
        if isinstance(r.vector, list):  # one unnamed dense vector, as tiermem creates
            yield str(r.id), cast("list[float]", r.vector), r.payload or {}


def _to_filter(payload_filter: PayloadFilter | None) -> qm.Filter | None:
    if not payload_filter:
        return None
    conditions: list[qm.Condition] = [
        qm.FieldCondition(
            key=key, match=qm.MatchAny(any=value) if several else qm.MatchValue(value=value)
        )
        for key, value, several in filter_terms(payload_filter)
    ]
    return qm.Filter(must=conditions)


_embedded_sync: Literal["normal", "full"] = "full"  # use_embedded_sync's last word


def use_embedded_sync(mode: Literal["normal", "full"]) -> None:
    """How embedded collections' SQLite files commit, for the embedded client about to be
    opened (QdrantVectorStore calls it; TIERMEM_QDRANT__EMBEDDED_SYNC).

    qdrant-client commits each point on its own, and under SQLite's defaults each commit
    waits for fsyncs while this store's lock is held: 10 points cost 24 ms instead of 4
    (bench/results/context.md). "normal" opens them in WAL mode with synchronous=NORMAL.
    qdrant-client has no option for it, so its persistence class is wrapped, once; the
    pragmas are plain SQLite and change no stored data (a file once in WAL mode stays so,
    and with "full" keeps SQLite's default fsyncs).
    """
    global _embedded_sync
    _embedded_sync = mode
    from qdrant_client.local import persistence

    cls = persistence.CollectionPersistence
    ensure_table = getattr(cls, "_ensure_table", None)
    if ensure_table is None:  # a qdrant-client that moved it: keep its own behaviour
        logger.warning("embedded_sync=%s not applied: qdrant-client changed its storage", mode)
        return
    if getattr(ensure_table, "tiermem_sync", False):
        return

    def ensure_table_with_sync(self: Any) -> None:
        if _embedded_sync == "normal":
            self.storage.execute("PRAGMA journal_mode=WAL")
            self.storage.execute("PRAGMA synchronous=NORMAL")
        ensure_table(self)

    ensure_table_with_sync.tiermem_sync = True  # type: ignore[attr-defined]
    cls._ensure_table = ensure_table_with_sync  # type: ignore[method-assign]
