"""Vector storage: the VectorStore protocol, its Qdrant implementation, and naming helpers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.vectors.base import PayloadFilter, Vector, VectorHit, VectorPoint, VectorStore
from shared.vectors.naming import collection_name, point_id
from shared.vectors.qdrant_store import QdrantVectorStore

if TYPE_CHECKING:
    from shared.config import Settings

__all__ = [
    "PayloadFilter",
    "QdrantVectorStore",
    "Vector",
    "VectorHit",
    "VectorPoint",
    "VectorStore",
    "collection_name",
    "open_vector_store",
    "point_id",
]


def open_vector_store(settings: Settings) -> VectorStore:
    """The store the settings choose: a Qdrant server, an embedded folder (Qdrant Edge or
    qdrant-client's local mode), or memory."""
    if settings.qdrant_path is not None and settings.qdrant.engine == "edge":
        from shared.vectors.edge_store import EdgeVectorStore

        return EdgeVectorStore(path=settings.qdrant_path, placement=settings.qdrant.vector_memory)
    return QdrantVectorStore.from_settings(settings)
