"""The VectorStore protocol every caller talks to, and the values it takes and returns."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

import numpy as np
import numpy.typing as npt

from shared.errors import InvalidInput

Vector = npt.NDArray[np.floating[Any]] | Sequence[float]
# {"key": value} must equal; {"key": [v1, v2]} must equal one of them (values: str, int, bool).
PayloadFilter = dict[str, Any]
# Where an engine keeps vectors and payloads (TIERMEM_QDRANT__VECTOR_MEMORY): "disk" reads
# them from files through the page cache, "ram" holds them in memory.
Placement = Literal["disk", "ram"]


# A collection shared by many users (its `tenant_field` set), on every engine: Qdrant's
# multitenancy setting — no global graph (a user's query is narrowed by the tenant index to
# their few points, scored exactly), a graph per user once a user outgrows a full scan.
class HnswSetting(TypedDict):
    m: int
    ef_construct: int
    full_scan_threshold: int  # KB of vectors
    payload_m: int


SHARED_HNSW = HnswSetting(m=0, ef_construct=100, full_scan_threshold=10_000, payload_m=16)


# A collection made with sparse=True holds two named vectors a point: the dense one under
# DENSE, and a BM25 sparse one under SPARSE whose terms the engine weighs by IDF (ADR 0013).
# One made without (every fact collection, and message collections of tiermem before
# ADR 0013) holds one unnamed dense vector.
DENSE = "dense"
SPARSE = "bm25"


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Term ids (token hashes, never text) and their weights, as shared.vectors.sparse makes
    them."""

    indices: list[int]
    values: list[float]


# eq=False: comparing two points would compare numpy arrays, whose truth value is ambiguous.
@dataclass(frozen=True, eq=False, slots=True)
class VectorPoint:
    id: str  # a UUID string; see naming.point_id for deterministic ones
    # None: a point found by its words only (in a collection with sparse vectors).
    vector: Vector | None
    payload: dict[str, Any]
    # Written only to a collection made with sparse=True; one made without keeps the dense
    # vector alone (and skips a point that has none).
    sparse: SparseVector | None = None


@dataclass(frozen=True, slots=True)
class VectorHit:
    id: str  # canonical lowercase hyphenated UUID, whatever spelling was upserted
    score: float  # cosine similarity for search; 0.0 for retrieve
    payload: dict[str, Any]
    # Only filled by retrieve(with_vectors=True). Cosine collections store the vector
    # L2-normalized, so this is the unit vector, not necessarily what was upserted.
    vector: list[float] | None = None


@dataclass(frozen=True, slots=True)
class HybridHits:
    """One hybrid query's two ranked lists, best first: by meaning (the dense vector) and by
    words (BM25 over the sparse vector). The caller fuses them: it wants each hit's rank in
    each list, not only a fused order.

    `dense_scores` / `sparse_scores`: every hit of either list scored by both (a second,
    id-filtered pass), so a hit near the top of one list and just below the other's cut
    keeps its real score there; a hit absent from one has no score there (no dense vector,
    or no word of the query)."""

    dense: list[VectorHit]
    sparse: list[VectorHit]
    dense_scores: dict[str, float] = field(default_factory=dict)
    sparse_scores: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CollectionState:
    """What an operator asks of a collection: its size and whether the engine keeps up."""

    points: int
    segments: int
    indexed_vectors: int  # in HNSW-indexed segments; the rest are scored exactly
    # ok | optimizing (a server is rebuilding segments) | pending (a server waits for a write
    # to start optimizing) | none (Qdrant Edge has no background optimizer) | error: <text>
    optimizer: str


@runtime_checkable
class VectorStore(Protocol):
    """Named collections of fixed-dimension vectors under cosine distance, with JSON payloads."""

    def ensure_collection(
        self,
        collection: str,
        dim: int,
        *,
        tenant_field: str | None = None,
        sparse: bool = False,
        keyword_fields: Sequence[str] = (),
    ) -> None:
        """Create the collection if missing; idempotent and safe to race. `tenant_field`: a
        keyword payload field every point carries and every query filters on (one user's
        share of a shared collection), indexed so the engine keeps its points together.
        `sparse`: points hold a BM25 sparse vector beside the dense one (DENSE, SPARSE), for
        hybrid_search. `keyword_fields`: payload fields indexed so that filtering on them
        stays cheap. An existing collection is left as it was made (see has_sparse)."""
        ...

    def has_sparse(self, collection: str) -> bool | None:
        """Whether the collection was made with sparse vectors; None when it is missing."""
        ...

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        """Insert or replace by id; creates the collection (dim from the first dense vector,
        sparse if a point carries a sparse vector) unless every point is sparse-only."""
        ...

    def delete(
        self, collection: str, ids: Sequence[str], *, payload_filter: PayloadFilter | None = None
    ) -> None:
        """Remove points (only those that also match the filter, if given); a missing
        collection or id is not an error."""
        ...

    def delete_where(self, collection: str, payload_filter: PayloadFilter) -> None:
        """Remove every point matching the filter (not empty); a missing collection is fine."""
        ...

    def search(
        self,
        collection: str,
        vector: Vector,
        *,
        limit: int,
        score_threshold: float | None = None,
        payload_filter: PayloadFilter | None = None,
    ) -> list[VectorHit]:
        """Nearest points, best first; a missing collection gives []."""
        ...

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
        """The `limit` nearest points by the dense vector and the `limit` best by BM25 over
        the sparse one, as one request; a point matching any term of `exclude` is left out
        of both. IDF is taken over the points matching `payload_filter` (in a shared
        collection: the user's own), not the whole collection. Hits carry ids and scores,
        no payload. No sparse query (a query of stopwords only): an empty sparse list.
        None when the collection cannot answer: missing, or made without sparse vectors."""
        ...

    def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[VectorHit]:
        """The points that exist among ids, in the order asked, with score 0 (the dense
        vector with with_vectors; None for a sparse-only point)."""
        ...

    def count(self, collection: str, *, payload_filter: PayloadFilter | None = None) -> int:
        """Exact number of points (matching the filter); a missing collection gives 0."""
        ...

    @property
    def reclaims_deleted(self) -> str:
        """When the disk that deleted points held is freed (told to whoever deletes a user)."""
        ...

    def compact(self, collection: str) -> bool:
        """Rewrite the collection without its deleted points where the engine leaves that to
        the caller (True: done); False where the engine does it by itself."""
        ...

    def describe(self, collection: str) -> CollectionState | None:
        """Points, segments and optimizer state; None for a missing collection."""
        ...

    def drop_collection(self, collection: str) -> None:
        """Delete the collection and its points; missing is not an error."""
        ...

    def list_collections(self) -> list[str]:
        """Names of all collections, sorted."""
        ...

    def close(self) -> None:
        """Release the client (and, embedded, the folder lock); idempotent."""
        ...


def canonical_id(point_id: str) -> str:
    # Validate here so every store rejects a bad id alike (in memory it would silently treat
    # it as missing on reads, the server answers 400) and ids compare by canonical form.
    try:
        return str(uuid.UUID(point_id))
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidInput(
            f"vector point ids must be UUID strings, got {point_id!r}",
            details={"id": str(point_id)},
        ) from exc


def as_floats(vector: Vector) -> list[float]:
    array = np.asarray(vector, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise InvalidInput(f"a vector must be one non-empty row of floats, got shape {array.shape}")
    # A NaN or infinite component would poison every cosine score it touches.
    if not np.isfinite(array).all():
        raise InvalidInput("a vector holds NaN or infinite values")
    values: list[float] = array.tolist()
    return values


def checked_sparse(vector: SparseVector) -> SparseVector:
    indices, values = list(vector.indices), [float(x) for x in vector.values]
    if len(indices) != len(values) or len(set(indices)) != len(indices):
        raise InvalidInput("a sparse vector needs one value per index and distinct indices")
    if not all(isinstance(i, int) and 0 <= i < 1 << 32 for i in indices):
        raise InvalidInput("sparse vector indices are integers from 0 to 2^32 - 1")
    if not all(math.isfinite(x) for x in values):
        raise InvalidInput("a sparse vector holds NaN or infinite values")
    return SparseVector(indices, values)


def hybrid_query(
    dense: Vector, sparse: SparseVector | None
) -> tuple[list[float], SparseVector | None]:
    """A hybrid query's vectors, checked; no sparse vector when it has no terms."""
    words = None if sparse is None or not sparse.indices else checked_sparse(sparse)
    return as_floats(dense), words


@dataclass(frozen=True, slots=True)
class CheckedPoint:
    """A point as a collection of a given form stores it: id canonical, vectors checked."""

    id: str
    dense: list[float] | None
    sparse: SparseVector | None
    payload: dict[str, Any]


def checked_points(points: Sequence[VectorPoint], collection: str) -> list[CheckedPoint]:
    """The points with canonical ids and checked vectors, refused unless every dense vector
    has one dimension and every point has a vector."""
    checked = []
    dim: int | None = None
    for p in points:
        dense = None if p.vector is None else as_floats(p.vector)
        sparse = None if p.sparse is None else checked_sparse(p.sparse)
        if dense is None and sparse is None:
            raise InvalidInput(f"point {p.id} has no vector", details={"collection": collection})
        if dense is not None:
            dim = dim or len(dense)
            if len(dense) != dim:
                raise InvalidInput(
                    f"all vectors of one upsert must have the same dimension ({dim}), "
                    f"point {p.id} has {len(dense)}",
                    details={"collection": collection},
                )
        checked.append(CheckedPoint(canonical_id(p.id), dense, sparse, p.payload))
    return checked


def dense_dim(points: Sequence[CheckedPoint]) -> int | None:
    return next((len(p.dense) for p in points if p.dense is not None), None)


def fitted(points: Sequence[CheckedPoint], *, sparse: bool) -> list[CheckedPoint]:
    """What a collection of the given form can hold: one made without sparse vectors (before
    ADR 0013; `tiermem reindex` remakes it) keeps the dense vectors and skips sparse-only
    points."""
    if sparse:
        return list(points)
    return [CheckedPoint(p.id, p.dense, None, p.payload) for p in points if p.dense is not None]


def ordered_hits(
    wanted: Sequence[str], records: Sequence[Any], *, with_vectors: bool
) -> list[VectorHit]:
    """retrieve's answer from an engine's records: those found, in the order asked, score 0."""
    by_id = {str(r.id): r for r in records}
    hits = []
    for point_id in wanted:
        record = by_id.get(point_id)
        if record is None:
            continue
        raw = record.vector
        if isinstance(raw, dict):  # named vectors: the dense one is "" or DENSE
            raw = raw.get("", raw.get(DENSE))
        vec = np.asarray(raw, dtype=np.float64).tolist() if with_vectors and raw else None
        hits.append(VectorHit(id=point_id, score=0.0, payload=record.payload or {}, vector=vec))
    return hits


def check_query_dim(query: Sequence[float], dim: int, collection: str) -> None:
    if len(query) != dim:
        raise InvalidInput(
            f"query vector has {len(query)} dimensions, collection {collection} holds {dim}",
            details={"collection": collection},
        )


def filter_terms(
    payload_filter: PayloadFilter, *, booleans: bool = True
) -> list[tuple[str, Any, bool]]:
    """A PayloadFilter's conditions, checked, as (key, value or list of values, is a list):
    a string, an integer or (where the engine matches them) a boolean, or a list of only
    strings or only integers (what Qdrant's MatchAny takes)."""
    terms = []
    for key, value in payload_filter.items():
        several = isinstance(value, list | tuple | set | frozenset)
        if several:
            options = list(value)
            if not (
                all(isinstance(v, str) for v in options)
                or all(isinstance(v, int) and not isinstance(v, bool) for v in options)
            ):
                raise InvalidInput(
                    f"payload filter {key!r}: a list must hold only strings or only integers",
                    details={"key": key},
                )
            value = options
        elif isinstance(value, bool) and not booleans:
            raise InvalidInput(
                f"payload filter {key!r}: the embedded engine cannot match a boolean value "
                "(qdrant-edge reads True as 1); store and match it as a string",
                details={"key": key},
            )
        elif not isinstance(value, str | int | bool):
            raise InvalidInput(
                f"payload filter {key!r}: match a string, integer, boolean or a list of them, "
                f"not {type(value).__name__}",
                details={"key": key},
            )
        terms.append((key, value, several))
    return terms
