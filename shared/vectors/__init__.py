"""Vector storage: the VectorStore protocol, its Edge and qdrant-client stores, naming helpers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from shared.vectors.base import (
    HybridHits,
    PayloadFilter,
    SparseVector,
    Vector,
    VectorHit,
    VectorPoint,
    VectorStore,
)
from shared.vectors.naming import collection_name, point_id

if TYPE_CHECKING:
    from shared.config import Settings

__all__ = [
    "HybridHits",
    "PayloadFilter",
    "SparseVector",
    "Vector",
    "VectorHit",
    "VectorPoint",
    "VectorStore",
    "collection_name",
    "local_mode_leftovers",
    "open_vector_store",
    "point_id",
]


def open_vector_store(settings: Settings) -> VectorStore:
    """The store the settings choose: Qdrant Edge on an embedded folder, a Qdrant server or
    cluster, or qdrant-client in memory (tests and development)."""
    # Each engine's client is imported when chosen: qdrant-client alone costs ~0.5 s of a
    # restart that an embedded store does not need.
    q = settings.qdrant
    if settings.qdrant_path is not None:
        from shared.vectors.edge_store import EdgeVectorStore

        return EdgeVectorStore(path=settings.qdrant_path, placement=q.vector_memory)
    from shared.vectors.qdrant_store import QdrantVectorStore

    if q.url:
        return QdrantVectorStore(url=q.url, api_key=q.api_key, placement=q.vector_memory)
    return QdrantVectorStore(in_memory=True)


def local_mode_leftovers(settings: Settings) -> Path | None:
    """Vectors qdrant-client's local mode (the embedded engine of tiermem before Qdrant
    Edge, ADR 0012) left where this tiermem's embedded folder is, or in its default place
    `<data dir>/qdrant`: nothing reads them now; `tiermem reindex` rebuilds them from SQL,
    then what this returns can be deleted (a folder, or the `collection` folder inside the
    vector folder when both share one)."""
    if settings.qdrant_path is None:
        return None  # a server, or memory
    ours = Path(settings.qdrant_path).resolve()
    places = [ours] if settings.qdrant.path else [ours, settings.data_dir.resolve() / "qdrant"]
    for place in places:
        collections = place / "collection"  # local mode's: collection/<name>/storage.sqlite
        if collections.is_dir() and any(collections.iterdir()):
            return collections if place == ours else place
    return None
