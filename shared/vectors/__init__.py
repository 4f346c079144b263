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
    """The store the settings choose: a Qdrant server, an embedded folder, or memory."""
    return QdrantVectorStore.from_settings(settings)
