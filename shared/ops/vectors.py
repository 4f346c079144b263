"""The vector store as operators see it: engine, layout, collections, points, segments,
optimizer state and disk."""

from __future__ import annotations

import time
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from shared.config import Settings
from shared.errors import DamagedCollection
from shared.vectors.base import CollectionState, VectorStore
from shared.vectors.scope import tiermem_collections

# /metrics is scraped every 15 s or so: its vector numbers may be this old, so a scrape
# neither walks the folder nor reopens shards each time.
METRICS_MAX_AGE_S = 60.0
# Describing a collection opens it (a shard load on the embedded engine). With a collection
# per user that is one per user, so past this many the view reports the count alone.
MAX_DESCRIBED = 1_000


class VectorStats(BaseModel):
    engine: str = Field(description="edge (an embedded folder) | server | memory")
    layout: str
    collections: int | None = Field(description="tiermem's collections (None: not readable)")
    points: int | None = Field(description="every point of every collection (None: unknown)")
    points_by_layout: dict[str, int] | None = Field(
        default=None, description="points in collections of each layout"
    )
    segments: int | None = Field(default=None, description="engine segments, all collections")
    indexed_vectors: int | None = Field(
        default=None,
        description="vectors in HNSW-indexed segments (the rest are scored exactly, as a "
        "user's few points in a partitioned collection always are)",
    )
    optimizer: dict[str, int] | None = Field(
        default=None,
        description="collections per optimizer state: ok, optimizing, pending (a server), "
        "none (the embedded engine runs no background optimizer), error: <text>",
    )
    disk_bytes: int | None = Field(description="blocks the embedded folder holds on disk")
    other_layout_collections: int | None = Field(
        description="collections of the other layout, waiting for `tiermem reindex`"
    )
    note: str | None = Field(default=None, description="why some numbers are missing")


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
        stats.note = "the folder belongs to another process: ask its API (GET /v1/ops/vectors)"
        return stats
    ours = tiermem_collections(store, prefix=q.collection_prefix)
    stats.collections = len(ours)
    stats.other_layout_collections = sum(layout != q.layout for layout in ours.values())
    if len(ours) > MAX_DESCRIBED:
        stats.note = (
            f"{len(ours):,} collections (a collection per user): points and segments are "
            f"counted up to {MAX_DESCRIBED:,} collections"
        )
        return stats
    states: dict[str, CollectionState] = {}
    damaged: list[str] = []
    for name in ours:
        try:
            state = store.describe(name)
        except DamagedCollection:  # the view (and /metrics) still answers, and says so
            damaged.append(name)
            continue
        if state is not None:
            states[name] = state
    _add_up(stats, states, ours)
    if damaged:
        stats.optimizer = {**(stats.optimizer or {}), "error: damaged": len(damaged)}
        stats.note = (
            f"{len(damaged)} damaged collections left out until `tiermem reindex` rebuilds "
            f"them from SQL: {', '.join(damaged)}"
        )
    return stats


# store → (when, stats); weak, so a closed store's numbers go with it.
_recent: weakref.WeakKeyDictionary[VectorStore, tuple[float, VectorStats]] = (
    weakref.WeakKeyDictionary()
)


def recent_vector_stats(
    *, settings: Settings, store: VectorStore | None, max_age_s: float = METRICS_MAX_AGE_S
) -> VectorStats:
    """vector_stats, reused while younger than `max_age_s` (for /metrics)."""
    if store is None:
        return vector_stats(settings=settings, store=None)
    now, kept = time.monotonic(), _recent.get(store)
    if kept is None or now - kept[0] > max_age_s:
        kept = _recent[store] = (now, vector_stats(settings=settings, store=store))
    return kept[1]


def _add_up(
    stats: VectorStats, states: dict[str, CollectionState], layouts: Mapping[str, str]
) -> None:
    by_layout: Counter[str] = Counter()
    for name, state in states.items():
        by_layout[layouts[name]] += state.points
    stats.points = sum(by_layout.values())
    stats.points_by_layout = dict(by_layout)
    stats.segments = sum(s.segments for s in states.values())
    stats.indexed_vectors = sum(s.indexed_vectors for s in states.values())
    stats.optimizer = dict(Counter(s.optimizer for s in states.values()))


@dataclass(frozen=True)
class Compaction:
    compacted: int  # collections rewritten
    collections: int  # tiermem's collections in the store
    disk_before: int | None
    disk_after: int | None
    reclaims_deleted: str  # when the engine frees deleted points where it does it itself


def compact_all(
    *, settings: Settings, store: VectorStore, progress: Callable[[int], None] | None = None
) -> Compaction:
    """Every collection of tiermem's rewritten without its deleted points, where the engine
    leaves that to us (`tiermem compact`; the store must be this process's alone)."""
    before = disk_bytes(settings.qdrant_path)
    ours = tiermem_collections(store, prefix=settings.qdrant.collection_prefix)
    compacted = 0
    for name in ours:
        compacted += store.compact(name)
        if progress:
            progress(1)
    return Compaction(
        compacted=compacted,
        collections=len(ours),
        disk_before=before,
        disk_after=disk_bytes(settings.qdrant_path),
        reclaims_deleted=store.reclaims_deleted,
    )
