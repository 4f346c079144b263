"""The VectorStore on qdrant-client: a Qdrant server or cluster, or in memory (tests, dev)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from types import TracebackType
from typing import Any, Literal, NamedTuple, TypeVar

import httpx
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from shared.errors import InvalidInput, PermanentError, Unavailable
from shared.vectors.base import (
    DENSE,
    SHARED_HNSW,
    SPARSE,
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
    fitted,
    hybrid_query,
    ordered_hits,
)
from shared.vectors.qdrant_convert import to_filter, to_hits, to_struct

logger = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M")
Mode = Literal["server", "memory"]
RECHECK_S = 60.0

# Gateway-type statuses mean "the server is not there right now", not "your request is bad".
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
# A collection's status as operators read it (Qdrant: green, yellow, grey, red).
_OPTIMIZER = {
    qm.CollectionStatus.GREEN: "ok",
    qm.CollectionStatus.YELLOW: "optimizing",
    qm.CollectionStatus.GREY: "pending",
    qm.CollectionStatus.RED: "error",
}


class QdrantVectorStore:
    """One QdrantClient chosen once: a Qdrant server or cluster (url), or in memory.

    In-memory mode is qdrant-client's pure-Python prototype, for tests and development
    only: brute-force numpy search over internal arrays that concurrent writers corrupt,
    so every call on it runs under one re-entrant lock per store. An embedded folder is
    Qdrant Edge's (shared.vectors.edge_store).
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        in_memory: bool = False,
        api_key: str | None = None,
        placement: Placement = "disk",
    ) -> None:
        if bool(url) == in_memory:
            given = "both" if url else "neither"
            raise ValueError(f"QdrantVectorStore needs exactly one of url or in_memory ({given})")
        if api_key is not None and url is None:
            raise ValueError("api_key only applies to a Qdrant server (url)")

        self._url = url
        self._placement = placement
        self._mode: Mode = "server" if url else "memory"
        # Server requests are independent HTTP calls; the in-memory client shares numpy
        # arrays between calls, so it needs serializing.
        self._lock: AbstractContextManager[Any] = nullcontext() if url else threading.RLock()
        # name → (dim, has sparse vectors) of collections known to exist, so upsert and
        # search need no round trip to learn it. Plain dict operations are atomic under the
        # GIL; a race only costs a lookup.
        self._known: dict[str, _Form] = {}
        self._closed = False
        if url is None:
            self._client = QdrantClient(location=":memory:")
        else:
            # No compatibility probe: it is network I/O in a constructor, and it only warns.
            self._client = QdrantClient(url=url, api_key=api_key, check_compatibility=False)

    @property
    def mode(self) -> Mode:
        return self._mode

    def __repr__(self) -> str:
        target = self._url or ":memory:"
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

        The server answers 404; in-memory mode raises a bare ValueError, so instead of matching
        its text we ask it (cheap: a dict lookup, under the lock the caller holds).
        """
        if isinstance(exc, UnexpectedResponse):
            return exc.status_code == 404
        if isinstance(exc, ValueError) and self._mode != "server":
            return not self._client.collection_exists(collection)
        return False

    def _unless_missing(self, collection: str, fn: Callable[[], T], missing: M) -> T | M:
        """`_call(fn)`, or `missing` when the collection does not exist (dropped, perhaps
        behind our cache's back by another process: the cache forgets it too)."""
        with self._lock:
            try:
                return self._call(fn)
            except (UnexpectedResponse, ValueError) as exc:
                if not self._is_missing(exc, collection):
                    raise
                self._known.pop(collection, None)
                return missing

    def _existing(self, collection: str) -> _Form | None:
        info = self._unless_missing(
            collection, lambda: self._client.get_collection(collection), None
        )
        if info is None:
            return None
        params: Any = info.config.params.vectors
        sparse = SPARSE in (info.config.params.sparse_vectors or {})
        if sparse and isinstance(params, dict):
            params = params.get(DENSE)
        if not isinstance(params, qm.VectorParams) or params.distance != qm.Distance.COSINE:
            raise PermanentError(
                f"Qdrant collection {collection} exists but was not created by tiermem "
                f"(expected one unnamed cosine vector, or {DENSE!r} and a {SPARSE!r} sparse "
                "vector); drop it or use another prefix",
                details={"collection": collection},
            )
        return _Form(params.size, sparse, time.monotonic())

    def _form(self, collection: str) -> _Form | None:
        known = self._known.get(collection)
        if known is not None and not known.sparse and time.monotonic() > known.read_at + RECHECK_S:
            known = None  # `tiermem reindex` may have remade it since, from another process
        if known is None:
            known = self._existing(collection)
            if known is not None:
                self._known[collection] = known
        return known

    # -- VectorStore ------------------------------------------------------------------

    def ensure_collection(
        self,
        collection: str,
        dim: int,
        *,
        tenant_field: str | None = None,
        sparse: bool = False,
        keyword_fields: Sequence[str] = (),
    ) -> None:
        self._ensure(collection, dim, tenant_field, sparse, keyword_fields)

    def _ensure(
        self,
        collection: str,
        dim: int,
        tenant_field: str | None = None,
        sparse: bool = False,
        keyword_fields: Sequence[str] = (),
    ) -> _Form:
        if dim <= 0:
            raise InvalidInput(f"vector dimension must be positive, got {dim}")
        known = self._known.get(collection)
        if known is None:
            with self._lock:
                known = self._existing(collection)
                if known is None:
                    wanted = _Form(dim, sparse, time.monotonic())
                    known = self._create(collection, wanted, tenant_field, keyword_fields)
            self._known[collection] = known
        if known.dim != dim:
            raise PermanentError(
                f"Qdrant collection {collection} holds {known.dim}-dimension vectors but got "
                f"{dim}; was the embedding model changed? Rebuild vectors with `tiermem reindex`.",
                details={"collection": collection, "expected_dim": known.dim, "got_dim": dim},
            )
        return known

    def _create(
        self,
        collection: str,
        form: _Form,
        tenant_field: str | None,
        keyword_fields: Sequence[str],
    ) -> _Form:
        # What Qdrant Edge makes of the same settings (edge_spec.ShardSpec.config), so the
        # query plan is one from a laptop to a cluster; in-memory mode ignores all of it.
        on_disk = self._placement == "disk"
        dense = qm.VectorParams(
            size=form.dim,
            distance=qm.Distance.COSINE,
            datatype=qm.Datatype.FLOAT16,
            on_disk=on_disk,
        )
        bm25 = qm.SparseVectorParams(
            modifier=qm.Modifier.IDF, index=qm.SparseIndexParams(on_disk=on_disk)
        )
        hnsw = qm.HnswConfigDiff(**SHARED_HNSW) if tenant_field is not None else None
        # Qdrant's multitenancy: the user key as a tenant index keeps each user's points
        # together on disk and makes the filtered search per user fast. (In-memory mode
        # ignores payload indexes; its search is exhaustive anyway.)
        indexes: list[tuple[str, qm.KeywordIndexParams]] = [
            (f, qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD)) for f in keyword_fields
        ]
        if tenant_field is not None:
            tenant = qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
            indexes.insert(0, (tenant_field, tenant))
        try:
            self._call(
                lambda: self._client.create_collection(
                    collection,
                    vectors_config={DENSE: dense} if form.sparse else dense,
                    sparse_vectors_config={SPARSE: bm25} if form.sparse else None,
                    hnsw_config=hnsw,
                    on_disk_payload=on_disk,
                )
            )
            for field, index in indexes if self._mode == "server" else ():
                self._call(
                    partial(
                        self._client.create_payload_index,
                        collection,
                        field_name=field,
                        field_schema=index,
                        wait=True,
                    )
                )
        except (UnexpectedResponse, ValueError):
            # Another worker thread or process created it between our check and create
            # (the server answers 409; in memory nothing races our lock): use theirs.
            existing = self._existing(collection)
            if existing is None:
                raise
            return existing
        logger.info(
            "created vector collection",
            extra={"collection": collection, "dim": form.dim, "sparse": form.sparse},
        )
        return form

    def has_sparse(self, collection: str) -> bool | None:
        form = self._form(collection)
        return None if form is None else form.sparse

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        checked = checked_points(points, collection)
        dim = dense_dim(checked)
        sparse = any(p.sparse is not None for p in checked)

        def form() -> _Form:
            if dim is not None:
                return self._ensure(collection, dim, sparse=sparse)
            known = self._form(collection)
            if known is None:
                raise InvalidInput(
                    f"Qdrant collection {collection} does not exist, and points without a "
                    "dense vector cannot say its dimension: ensure_collection first",
                    details={"collection": collection},
                )
            return known

        def write() -> bool:
            structs = [to_struct(p, made.sparse) for p in fitted(checked, sparse=made.sparse)]
            if structs:
                # wait=True: the dedup step searches right after writing and must see it.
                self._client.upsert(collection, points=structs, wait=True)
            return True

        made = form()
        with self._lock:
            if not self._unless_missing(collection, write, False):
                # Dropped behind our cache's back (delete-user in another process): recreate.
                made = form()
                self._call(write)

    def delete(
        self, collection: str, ids: Sequence[str], *, payload_filter: PayloadFilter | None = None
    ) -> None:
        if not ids:
            return
        canonical = [canonical_id(i) for i in ids]
        selector: qm.PointIdsList | qm.FilterSelector = qm.PointIdsList(points=list(canonical))
        if payload_filter:
            scoped = to_filter(payload_filter)
            assert scoped is not None
            scoped.must = [qm.HasIdCondition(has_id=list(canonical)), *(scoped.must or [])]
            selector = qm.FilterSelector(filter=scoped)
        self._unless_missing(
            collection,
            lambda: self._client.delete(collection, points_selector=selector, wait=True),
            None,
        )

    def delete_where(self, collection: str, payload_filter: PayloadFilter) -> None:
        where = to_filter(payload_filter)
        if where is None:
            raise InvalidInput("delete_where needs a filter; drop_collection removes everything")
        self._unless_missing(
            collection,
            lambda: self._client.delete(
                collection, points_selector=qm.FilterSelector(filter=where), wait=True
            ),
            None,
        )

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
        query_filter = to_filter(payload_filter)
        with self._lock:
            known = self._form(collection)
            if known is None:
                return []
            try:
                response = self._unless_missing(
                    collection,
                    lambda: self._client.query_points(
                        collection,
                        query=query,
                        using=DENSE if known.sparse else None,
                        limit=limit,
                        score_threshold=score_threshold,
                        query_filter=query_filter,
                        with_payload=True,
                        with_vectors=False,
                    ),
                    None,
                )
            except (UnexpectedResponse, ValueError):
                existing = self._existing(collection)  # a failed search only: the query?
                if existing is not None:
                    check_query_dim(query, existing.dim, collection)
                    if existing.sparse != known.sparse:  # remade meanwhile (`tiermem reindex`)
                        self._known[collection] = existing
                        return self.search(
                            collection,
                            query,
                            limit=limit,
                            score_threshold=score_threshold,
                            payload_filter=payload_filter,
                        )
                raise
        if response is None:
            return []
        return [
            VectorHit(id=str(p.id), score=float(p.score), payload=p.payload or {})
            for p in response.points
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
        scope = to_filter(payload_filter)
        # IDF over the points the filter selects (one user's in a shared collection), not
        # every tenant's: their words would set the weights of this user's (ADR 0013).
        idf = qm.SearchParams(idf=qm.IdfCorpusParams(corpus=scope)) if scope else None
        words = (
            qm.SparseVector(indices=terms.indices, values=terms.values)
            if terms is not None
            else None
        )

        def requests(size: int, ids: Sequence[str] = ()) -> list[qm.QueryRequest]:
            where = to_filter(payload_filter, exclude=exclude, has_ids=ids)
            batch = [qm.QueryRequest(query=query, using=DENSE, filter=where, limit=size)]
            if words is not None:
                batch.append(
                    qm.QueryRequest(query=words, using=SPARSE, filter=where, limit=size, params=idf)
                )
            return batch

        with self._lock:
            known = self._form(collection)
            if known is None or not known.sparse:
                return None
            check_query_dim(query, known.dim, collection)
            if limit <= 0:
                return HybridHits([], [])
            # One request: a server plans the two searches as a batch.
            found = self._unless_missing(
                collection,
                lambda: self._client.query_batch_points(collection, requests=requests(limit)),
                None,
            )
            if found is None:
                return None
            by_meaning = to_hits(found[0].points)
            by_words = to_hits(found[1].points) if words is not None else []
            ids = list(dict.fromkeys(h.id for h in [*by_meaning, *by_words]))
            # Then every candidate by both (ADR 0014): a few dozen points, found by id.
            again = (
                self._unless_missing(
                    collection,
                    lambda: self._client.query_batch_points(
                        collection, requests=requests(len(ids), ids)
                    ),
                    None,
                )
                if ids
                else []
            )
            if again is None:
                return None
        if not ids:
            return HybridHits([], [])
        return HybridHits(
            by_meaning,
            by_words,
            dense_scores={str(p.id): float(p.score) for p in again[0].points},
            sparse_scores=(
                {str(p.id): float(p.score) for p in again[1].points} if words is not None else {}
            ),
        )

    def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[VectorHit]:
        wanted = list(dict.fromkeys(canonical_id(i) for i in ids))  # dedupe, keep order
        if not wanted:
            return []
        records = self._unless_missing(
            collection,
            lambda: self._client.retrieve(
                collection, ids=wanted, with_payload=True, with_vectors=with_vectors
            ),
            None,
        )
        if records is None:
            return []
        return ordered_hits(wanted, records, with_vectors=with_vectors)

    def count(self, collection: str, *, payload_filter: PayloadFilter | None = None) -> int:
        where = to_filter(payload_filter)
        result = self._unless_missing(
            collection, lambda: self._client.count(collection, count_filter=where, exact=True), None
        )
        return 0 if result is None else result.count

    @property
    def reclaims_deleted(self) -> str:
        if self.mode == "server":
            return (
                "when the server's vacuum optimizer rewrites the segment (by Qdrant's defaults "
                "once 20 % of a segment of at least 1,000 points is deleted); no search "
                "returns the points meanwhile"
            )
        return "when this process exits (vectors held in memory)"

    def compact(self, collection: str) -> bool:
        return False  # a server vacuums by itself; memory mode frees on exit

    def describe(self, collection: str) -> CollectionState | None:
        info = self._unless_missing(
            collection, lambda: self._client.get_collection(collection), None
        )
        if info is None:
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
            self._unless_missing(
                collection, lambda: self._client.delete_collection(collection), None
            )
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
            self._client.close()


class _Form(NamedTuple):
    dim: int
    sparse: bool  # named vectors DENSE and SPARSE; else one unnamed dense vector
    # time.monotonic() when read; one without sparse vectors is read again after RECHECK_S
    read_at: float = 0.0
