"""The local modes' in-process exact index must answer exactly as Qdrant's own search does."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.vectors import QdrantVectorStore, VectorPoint
from shared.vectors.base import VectorHit

DIM = 24
KINDS = ["a", "b", "c"]
FILTERS: list[dict[str, Any] | None] = [
    None,
    {},
    {"kind": "a"},
    {"kind": ["a", "c"]},
    {"n": 1},
    {"n": [0, 3]},
    {"flag": True},
    {"tags": "x"},
    {"tags": ["y", "z"], "flag": False},
    {"kind": []},
    {"missing": "a"},
    {"nested.k": 1},  # a path: answered by Qdrant itself
]


@pytest.fixture(name="make_store", params=["memory", "path"])
def make_store_fixture(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., QdrantVectorStore]]:
    opened: list[QdrantVectorStore] = []

    def make(**kwargs: Any) -> QdrantVectorStore:
        target = (
            {"in_memory": True} if request.param == "memory" else {"path": str(tmp_path / "qdrant")}
        )
        # Index even the tiny collections here (the product leaves those to Qdrant).
        opened.append(QdrantVectorStore(**target, **{"min_indexed_points": 0, **kwargs}))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


@pytest.fixture(name="store")
def store_fixture(make_store: Callable[..., QdrantVectorStore]) -> QdrantVectorStore:
    return make_store()


def qdrant_search(store: QdrantVectorStore, *args: Any, **kwargs: Any) -> list[VectorHit]:
    """The same search on Qdrant's own path, over the same data."""
    store._index_for = lambda collection: None  # type: ignore[method-assign]  # noqa: ARG005
    try:
        return store.search(*args, **kwargs)
    finally:
        del store._index_for


def random_payload(rng: np.random.Generator) -> dict[str, Any]:
    n: Any = [0, 1, 2, 3, True, 1.0][int(rng.integers(6))]  # True and 1.0 must not match 1
    return {
        "kind": KINDS[int(rng.integers(3))],
        "n": n,
        "flag": bool(rng.integers(2)),
        "tags": [t for t in "xyz" if rng.random() < 0.4],
        "nested": {"k": int(rng.integers(2))},
    }


def random_vector(rng: np.random.Generator) -> np.ndarray[Any, Any]:
    v = rng.normal(size=DIM)
    if rng.random() < 0.02:
        v = np.zeros(DIM)  # never normalized, scores 0 against everything
    return v


def assert_same_hits(
    got: list[VectorHit], want: list[VectorHit], truth: dict[str, np.ndarray[Any, Any]], q: Any
) -> None:
    assert len(got) == len(want)
    qn = np.asarray(q, dtype=np.float64)
    qn = qn / (np.linalg.norm(qn) or 1.0)
    for g, w in zip(got, want, strict=True):
        assert g.score == pytest.approx(w.score, abs=1e-5)
        # Each hit carries its own point's score and payload (ids may swap only within ties).
        assert g.score == pytest.approx(float(truth[g.id] @ qn), abs=1e-5)
        if g.id != w.id:  # only a tie (duplicate vectors) may swap, also across the cutoff
            assert abs(g.score - w.score) <= 1e-5
    assert len({g.id for g in got}) == len(got)
    assert [h.score for h in got] == sorted((h.score for h in got), reverse=True)


def test_cached_search_matches_qdrant_under_random_writes(store: QdrantVectorStore) -> None:
    rng = np.random.default_rng(7)
    coll = "exact"
    truth: dict[str, np.ndarray[Any, Any]] = {}
    payloads: dict[str, dict[str, Any]] = {}

    def write(ids: list[str]) -> None:
        points = []
        for point_id in ids:
            v = random_vector(rng)
            if truth and rng.random() < 0.05:
                v = truth[list(truth)[int(rng.integers(len(truth)))]].copy()  # a tie
            norm = np.linalg.norm(v)
            truth[point_id] = v / norm if norm > 0 else v
            payloads[point_id] = random_payload(rng)
            points.append(VectorPoint(point_id, v, payloads[point_id]))
        store.upsert(coll, points)

    write([str(uuid.uuid4()) for _ in range(1000)])
    for round_ in range(50):
        if round_ % 2 == 1:  # interleave writes: new points, replaced points, deletes
            known = list(truth)
            replaced = [known[int(i)] for i in rng.choice(len(known), 10, replace=False)]
            write([str(uuid.uuid4()) for _ in range(10)] + replaced)
            gone = [known[int(i)] for i in rng.choice(len(known), 15, replace=False)]
            store.delete(coll, [*gone, str(uuid.uuid4())])
            for point_id in gone:
                truth.pop(point_id, None)
        q = rng.normal(size=DIM)
        for _ in range(6):
            kwargs: dict[str, Any] = {
                "limit": [1, 7, 60, 5000][int(rng.integers(4))],  # 5000 > n
                "score_threshold": [None, -0.2, 0.1, 0.35][int(rng.integers(4))],
                "payload_filter": FILTERS[int(rng.integers(len(FILTERS)))],
            }
            got = store.search(coll, q, **kwargs)
            want = qdrant_search(store, coll, q, **kwargs)
            assert_same_hits(got, want, truth, q)
            assert [h.payload for h in got] == [payloads[h.id] for h in got]
        assert coll in store._indexes
        assert len(store._indexes[coll]) == len(truth) == store.count(coll)
    # Limits above n return everything; an index copy stays apart from callers' edits.
    everything = store.search(coll, np.ones(DIM), limit=10_000)
    assert len(everything) == len(truth)
    everything[0].payload["kind"] = "changed"
    assert store.search(coll, np.ones(DIM), limit=1)[0].payload["kind"] != "changed"


def test_index_follows_drop_recreate_and_reopen(tmp_path: Path) -> None:
    folder = str(tmp_path / "qdrant")
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with QdrantVectorStore(path=folder, min_indexed_points=0) as store:
        store.upsert("c", [VectorPoint(a, [1.0, 0.0], {"k": 1})])
        assert [h.id for h in store.search("c", [1.0, 0.0], limit=5)] == [a]
        store.drop_collection("c")
        assert "c" not in store._indexes
        assert store.search("c", [1.0, 0.0], limit=5) == []
        store.upsert("c", [VectorPoint(b, [0.0, 1.0, 0.0], {"k": 2})])
        assert [h.id for h in store.search("c", [0.0, 1.0, 0.0], limit=5)] == [b]
        store.upsert("c", [VectorPoint(a, [1.0, 0.0, 0.0], {"k": 3})])
        store.delete("c", [b])
        [hit] = store.search("c", [0.0, 1.0, 0.0], limit=5)
        assert (hit.id, hit.payload) == (a, {"k": 3})
        assert abs(hit.score) < 1e-6
    # A fresh store loads the index from the folder on its first search.
    with QdrantVectorStore(path=folder, min_indexed_points=0) as store:
        assert "c" not in store._indexes
        [hit] = store.search("c", [1.0, 0.0, 0.0], limit=5, payload_filter={"k": 3})
        assert hit.id == a
        assert abs(hit.score - 1.0) < 1e-6
        assert "c" in store._indexes


def test_big_collections_use_qdrant_search(make_store: Callable[..., QdrantVectorStore]) -> None:
    store = make_store(max_indexed_points=3)
    ids = [str(uuid.uuid4()) for _ in range(4)]
    store.upsert("big", [VectorPoint(i, [1.0, float(n)], {}) for n, i in enumerate(ids)])
    assert [h.id for h in store.search("big", [1.0, 0.0], limit=1)] == [ids[0]]
    assert "big" not in store._indexes
    # An indexed collection that grows past the cap is forgotten.
    store.upsert("small", [VectorPoint(i, [1.0, 0.0], {}) for i in ids[:3]])
    store.search("small", [1.0, 0.0], limit=1)
    assert "small" in store._indexes
    store.upsert("small", [VectorPoint(ids[3], [0.0, 1.0], {})])
    assert "small" not in store._indexes
    assert [h.id for h in store.search("small", [0.0, 1.0], limit=1)] == [ids[3]]


def test_server_mode_never_indexes() -> None:
    store = QdrantVectorStore(url="http://127.0.0.1:1")
    try:
        assert store._index_for("anything") is None
    finally:
        store.close()


def test_enum_filter_values_match_their_plain_values(store: QdrantVectorStore) -> None:
    import enum

    class Kind(enum.StrEnum):
        A = "a"

    class Level(enum.IntEnum):
        ONE = 1

    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    store.upsert(
        "e", [VectorPoint(a, [1.0, 0.0], {"k": "a", "n": 1}), VectorPoint(b, [0.0, 1.0], {})]
    )
    for payload_filter in ({"k": Kind.A}, {"n": Level.ONE}, {"k": [Kind.A]}, {"n": [Level.ONE]}):
        got = store.search("e", [1.0, 1.0], limit=5, payload_filter=payload_filter)
        want = qdrant_search(store, "e", [1.0, 1.0], limit=5, payload_filter=payload_filter)
        assert [h.id for h in got] == [h.id for h in want] == [a]


def test_small_collections_are_left_to_qdrant_until_they_grow(
    make_store: Callable[..., QdrantVectorStore],
) -> None:
    store = make_store(min_indexed_points=5)
    ids = [str(uuid.uuid4()) for _ in range(6)]
    store.upsert("c", [VectorPoint(i, [1.0, float(n)], {}) for n, i in enumerate(ids[:4])])
    assert [h.id for h in store.search("c", [1.0, 0.0], limit=1)] == [ids[0]]
    assert "c" not in store._indexes  # 4 points: Qdrant's own search
    store.upsert("c", [VectorPoint(ids[4], [0.0, 1.0], {})])
    assert [h.id for h in store.search("c", [0.0, 1.0], limit=1)] == [ids[4]]
    assert "c" in store._indexes and len(store._indexes["c"]) == 5
    store.upsert("c", [VectorPoint(ids[5], [-1.0, 0.0], {})])  # kept in step from now on
    assert [h.id for h in store.search("c", [-1.0, 0.0], limit=1)] == [ids[5]]
