"""The vector store's ops view: counts by layout, and a bound on what one view opens."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from shared.config import Settings
from shared.ops import vectors as ops_vectors
from shared.vectors import VectorPoint
from shared.vectors.base import CollectionState
from shared.vectors.edge_store import EdgeVectorStore


def _settings(tmp_path: Path, layout: str) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, qdrant={"layout": layout})


def _user_collections(store: EdgeVectorStore, n: int) -> None:
    for i in range(n):  # tm_<32 hex>: the per_user layout's names
        point = VectorPoint(str(uuid.uuid4()), [1.0, float(i), 0.0], {})
        store.upsert(f"tm_{uuid.uuid4().hex}", [point])


def test_points_are_counted_per_layout_with_the_other_layout_named(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "partitioned")
    with_store = EdgeVectorStore(path=str(tmp_path / "vectors"))
    try:
        _user_collections(with_store, 2)
        with_store.upsert(
            f"tm_t{uuid.uuid4().hex}", [VectorPoint(str(uuid.uuid4()), [0.0, 1.0, 0.0], {})]
        )
        with_store.upsert("not_ours", [VectorPoint(str(uuid.uuid4()), [0.0, 1.0, 0.0], {})])
        stats = ops_vectors.vector_stats(settings=settings, store=with_store)
    finally:
        with_store.close()
    assert stats.collections == 3 and stats.other_layout_collections == 2
    assert stats.points == 3 and stats.points_by_layout == {"per_user": 2, "partitioned": 1}
    assert stats.optimizer == {"none": 3} and stats.note is None


class NoDescribing(EdgeVectorStore):
    """Fails the test if a view asks the engine about a collection."""

    def describe(self, collection: str) -> CollectionState | None:
        raise AssertionError(f"{collection} was described")


def test_a_collection_per_user_past_the_bound_is_counted_not_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ops_vectors, "MAX_DESCRIBED", 2)
    store = NoDescribing(path=str(tmp_path / "vectors"))
    try:
        _user_collections(store, 3)
        stats = ops_vectors.vector_stats(settings=_settings(tmp_path, "per_user"), store=store)
    finally:
        store.close()
    assert stats.collections == 3 and stats.points is None and stats.segments is None
    assert stats.note is not None and "3 collections" in stats.note


def test_a_folder_held_by_another_process_shows_what_its_files_tell(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "partitioned")
    store = EdgeVectorStore(path=str(tmp_path / "vectors"))
    try:
        _user_collections(store, 1)
    finally:
        store.close()
    stats = ops_vectors.vector_stats(settings=settings, store=None)
    assert stats.disk_bytes and stats.collections is None
    assert stats.note is not None and "GET /v1/ops/vectors" in stats.note


def test_metrics_reuse_the_numbers_until_they_are_older_than_the_bound(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "per_user")
    store = EdgeVectorStore(path=str(tmp_path / "vectors"))
    try:
        _user_collections(store, 1)
        first = ops_vectors.recent_vector_stats(settings=settings, store=store)
        _user_collections(store, 1)
        assert ops_vectors.recent_vector_stats(settings=settings, store=store).points == 1
        fresh = ops_vectors.recent_vector_stats(settings=settings, store=store, max_age_s=0)
        assert first.points == 1 and fresh.points == 2
    finally:
        store.close()


def test_a_damaged_collection_is_reported_not_a_failed_view(tmp_path: Path) -> None:
    root = tmp_path / "vectors"
    store = EdgeVectorStore(path=str(root))
    try:
        _user_collections(store, 2)
        damaged = store.list_collections()[0]
    finally:
        store.close()
    (root / damaged / "edge_config.json").unlink()
    store = EdgeVectorStore(path=str(root))
    try:
        stats = ops_vectors.vector_stats(settings=_settings(tmp_path, "per_user"), store=store)
    finally:
        store.close()
    assert stats.collections == 2 and stats.points == 1
    assert stats.optimizer == {"none": 1, "error: damaged": 1}
    assert stats.note is not None and damaged in stats.note and "`tiermem reindex`" in stats.note
