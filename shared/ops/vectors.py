"""The vector store as operators see it: engine, layout, collections, points and disk."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from shared.config import Settings
from shared.vectors.base import VectorStore
from shared.vectors.scope import layout_of


class VectorStats(BaseModel):
    engine: str = Field(description="edge (an embedded folder) | server | memory")
    layout: str
    collections: int | None = Field(description="tiermem's collections (None: not readable)")
    points: int | None = Field(description="every point of every collection (None: unknown)")
    disk_bytes: int | None = Field(description="blocks the embedded folder holds on disk")
    other_layout_collections: int | None = Field(
        description="collections of the other layout, waiting for `tiermem reindex`"
    )


def where_vectors_live(settings: Settings) -> str:
    q = settings.qdrant
    return "server" if q.url else "memory" if q.in_memory else "edge"


def disk_bytes(folder: str | None) -> int | None:
    if folder is None or not Path(folder).is_dir():
        return None
    return sum(p.stat().st_blocks * 512 for p in Path(folder).rglob("*") if p.is_file())


def vector_stats(*, settings: Settings, store: VectorStore | None) -> VectorStats:
    """With `store` None (another process owns the folder) only what the files tell."""
    q = settings.qdrant
    stats = VectorStats(
        engine=where_vectors_live(settings),
        layout=q.layout,
        collections=None,
        points=None,
        disk_bytes=disk_bytes(settings.qdrant_path),
        other_layout_collections=None,
    )
    if store is None:
        return stats
    layouts = {c: layout_of(c, q.collection_prefix) for c in store.list_collections()}
    ours = [c for c, layout in layouts.items() if layout]
    stats.collections = len(ours)
    stats.points = sum(store.count(c) for c in ours)
    stats.other_layout_collections = sum(layouts[c] != q.layout for c in ours)
    return stats
