"""One contract suite for every VectorStore implementation, plus naming and mode-specific checks."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import hmac
import json
import os
import re
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge

from shared.config import QdrantSettings, Settings
from shared.errors import InvalidInput, PermanentError, Unavailable
from shared.vectors import (
    HybridHits,
    VectorPoint,
    VectorStore,
    collection_name,
    open_vector_store,
    point_id,
    qdrant_store,
)
from shared.vectors.base import SPARSE, SparseVector
from shared.vectors.edge_spec import ShardSpec
from shared.vectors.edge_store import EdgeVectorStore
from shared.vectors.folder_owner import FolderOwner, read_owner, record_path
from shared.vectors.qdrant_store import QdrantVectorStore
from shared.vectors.sparse import document_terms, query_terms
from tests import processes

SERVER_URL = os.environ.get("TIERMEM_TEST_QDRANT_URL")
SERVER_API_KEY = os.environ.get("TIERMEM_TEST_QDRANT_API_KEY")
VALID_COLLECTION = re.compile(r"^[A-Za-z0-9_-]{1,255}$")

# Edge stores vectors as float16 (half the disk and memory, ADR 0012): ~3 decimal digits.
FLOAT16 = 1e-3


class NameFactory:
    """Fresh collection names under a per-test prefix, so runs on a shared server stay apart."""

    def __init__(self) -> None:
        self.prefix = f"test_{uuid.uuid4().hex[:12]}_"
        self._n = 0

    def __call__(self) -> str:
        self._n += 1
        return f"{self.prefix}{self._n}"


@pytest.fixture(name="names")
def names_fixture() -> NameFactory:
    return NameFactory()


@pytest.fixture(name="store", params=["memory", "edge", "server"])
def store_fixture(
    request: pytest.FixtureRequest, tmp_path: Path, names: NameFactory
) -> Iterator[Any]:
    kind = request.param
    store: Any
    if kind == "memory":  # qdrant-client in memory: the server's protocol, in this process
        store = QdrantVectorStore(in_memory=True)
    elif kind == "edge":
        store = EdgeVectorStore(path=str(tmp_path / "edge"))
    else:
        if not SERVER_URL:
            pytest.skip("TIERMEM_TEST_QDRANT_URL is not set: no Qdrant server to test against")
        store = QdrantVectorStore(url=SERVER_URL, api_key=SERVER_API_KEY)
    yield store
    if kind == "server":
        for name in store.list_collections():
            if name.startswith(names.prefix):
                store.drop_collection(name)
    store.close()


def pid() -> str:
    return str(uuid.uuid4())


def unit(*xs: float) -> list[float]:
    v = np.asarray(xs, dtype=np.float64)
    return list(v / np.linalg.norm(v))


@pytest.fixture(name="abcd")
def abcd_fixture(store: QdrantVectorStore, names: NameFactory) -> tuple[str, dict[str, str]]:
    """A collection of four 3-d points at known cosines to the query [1, 0, 0]."""
    coll = names()
    ids = {k: pid() for k in "abcd"}
    store.upsert(
        coll,
        [
            VectorPoint(
                ids["a"],
                np.array([1.0, 0.0, 0.0], np.float32),
                {"type": "goal", "n": 1, "on": True},
            ),
            VectorPoint(ids["b"], [0.8, 0.6, 0.0], {"type": "fact", "n": 2, "on": False}),
            VectorPoint(ids["c"], [0.0, 1.0, 0.0], {"type": "preference", "n": 3, "on": True}),
            VectorPoint(ids["d"], [-1.0, 0.0, 0.0], {"type": "fact", "n": 4, "on": True}),
        ],
    )
    return coll, ids


# -- the contract ------------------------------------------------------------------------


def test_implements_protocol(store: QdrantVectorStore) -> None:
    assert isinstance(store, VectorStore)


def test_search_orders_by_cosine_with_scores(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]]
) -> None:
    coll, ids = abcd
    hits = store.search(coll, np.array([1.0, 0.0, 0.0]), limit=3)
    assert [h.id for h in hits] == [ids["a"], ids["b"], ids["c"]]
    assert [h.score for h in hits] == pytest.approx([1.0, 0.8, 0.0], abs=FLOAT16)
    assert hits[0].payload == {"type": "goal", "n": 1, "on": True}
    assert all(h.vector is None for h in hits)
    # Cosine ignores magnitude.
    assert [h.id for h in store.search(coll, [5.0, 0.0, 0.0], limit=1)] == [ids["a"]]
    assert store.search(coll, [1.0, 0.0, 0.0], limit=0) == []


def test_score_threshold(store: QdrantVectorStore, abcd: tuple[str, dict[str, str]]) -> None:
    coll, ids = abcd
    hits = store.search(coll, [1.0, 0.0, 0.0], limit=10, score_threshold=0.5)
    assert [h.id for h in hits] == [ids["a"], ids["b"]]
    assert store.search(coll, [1.0, 0.0, 0.0], limit=10, score_threshold=1.5) == []


def test_payload_filter_value_and_list(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]]
) -> None:
    coll, ids = abcd
    q = [1.0, 0.0, 0.0]

    def found(payload_filter: dict[str, object]) -> set[str]:
        return {h.id for h in store.search(coll, q, limit=10, payload_filter=payload_filter)}

    assert found({"type": "fact"}) == {ids["b"], ids["d"]}
    assert found({"type": ["goal", "preference"]}) == {ids["a"], ids["c"]}
    assert found({"type": ("goal",)}) == {ids["a"]}
    assert found({"n": 3}) == {ids["c"]}
    assert found({"n": [1, 4]}) == {ids["a"], ids["d"]}
    # Several keys must all match.
    assert found({"type": "fact", "n": 4}) == {ids["d"]}
    assert found({"type": "nothing-like-this"}) == set()
    assert found({"type": []}) == set()
    # An empty filter is no filter.
    assert len(found({})) == 4
    # Filtered results keep the cosine order.
    hits = store.search(coll, q, limit=10, payload_filter={"type": "fact"})
    assert [h.id for h in hits] == [ids["b"], ids["d"]]


def test_boolean_payload_filters(store: Any, abcd: tuple[str, dict[str, str]]) -> None:
    coll, ids = abcd
    q = [1.0, 0.0, 0.0]
    if isinstance(store, EdgeVectorStore):  # qdrant-edge 0.9.0 reads True as 1: refused
        with pytest.raises(InvalidInput, match="boolean"):
            store.search(coll, q, limit=10, payload_filter={"on": False})
        return
    hits = store.search(coll, q, limit=10, payload_filter={"on": False})
    assert {h.id for h in hits} == {ids["b"]}
    hits = store.search(coll, q, limit=10, payload_filter={"type": "fact", "on": True})
    assert {h.id for h in hits} == {ids["d"]}


@pytest.mark.parametrize("bad", [1.5, None, {"x": 1}, ["a", 1], [True, False]])
def test_payload_filter_rejects_unmatchable_values(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]], bad: object
) -> None:
    coll, _ = abcd
    with pytest.raises(InvalidInput):
        store.search(coll, [1.0, 0.0, 0.0], limit=3, payload_filter={"type": bad})


def test_enum_filter_values_match_their_plain_values(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]]
) -> None:
    class Type(enum.StrEnum):
        FACT = "fact"

    class N(enum.IntEnum):
        FOUR = 4

    coll, ids = abcd
    for payload_filter in ({"type": Type.FACT, "n": N.FOUR}, {"type": [Type.FACT], "n": [N.FOUR]}):
        hits = store.search(coll, [1.0, 0.0, 0.0], limit=5, payload_filter=payload_filter)
        assert [h.id for h in hits] == [ids["d"]]


def test_a_query_of_another_dimension_is_invalid_input(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]]
) -> None:
    coll, _ = abcd
    with pytest.raises(InvalidInput, match="dimensions"):
        store.search(coll, [1.0, 0.0], limit=3)


def test_delete(store: QdrantVectorStore, abcd: tuple[str, dict[str, str]]) -> None:
    coll, ids = abcd
    store.delete(coll, [ids["a"], pid()])  # an unknown id is not an error
    assert store.count(coll) == 3
    assert ids["a"] not in {h.id for h in store.search(coll, [1.0, 0.0, 0.0], limit=10)}
    assert store.retrieve(coll, [ids["a"]]) == []
    store.delete(coll, [])
    assert store.count(coll) == 3


def test_delete_only_what_also_matches_the_filter(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]]
) -> None:
    coll, ids = abcd
    store.delete(coll, [ids["a"], ids["b"]], payload_filter={"type": "fact"})
    assert {h.id for h in store.retrieve(coll, list(ids.values()))} == {
        ids["a"],
        ids["c"],
        ids["d"],
    }
    # still searchable after a filtered delete
    assert [h.id for h in store.search(coll, [1.0, 0.0, 0.0], limit=1)] == [ids["a"]]


def test_delete_where_and_count_with_a_filter(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]], names: NameFactory
) -> None:
    coll, ids = abcd
    assert store.count(coll, payload_filter={"type": "fact"}) == 2
    assert store.count(coll, payload_filter={"n": [1, 3, 4]}) == 3
    store.delete_where(coll, {"type": "fact"})
    assert store.count(coll) == 2 and store.count(coll, payload_filter={"type": "fact"}) == 0
    assert [h.id for h in store.search(coll, [1.0, 0.0, 0.0], limit=4)] == [ids["a"], ids["c"]]
    store.delete_where(names(), {"type": "fact"})  # a missing collection is fine
    with pytest.raises(InvalidInput):
        store.delete_where(coll, {})


def test_a_tenant_field_collection_is_created_once(
    store: QdrantVectorStore, names: NameFactory
) -> None:
    coll = names()
    store.ensure_collection(coll, 3, tenant_field="tm_user")
    store.ensure_collection(coll, 3, tenant_field="tm_user")
    store.upsert(coll, [VectorPoint(pid(), [1.0, 0.0, 0.0], {"tm_user": "u1"})])
    assert store.count(coll, payload_filter={"tm_user": "u1"}) == 1


def test_retrieve_without_and_with_vectors(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]]
) -> None:
    coll, ids = abcd
    asked = [ids["c"], pid(), ids["a"], ids["c"]]
    hits = store.retrieve(coll, asked)
    # Order asked, unknown ids left out, duplicates once, score 0, no vectors.
    assert [h.id for h in hits] == [ids["c"], ids["a"]]
    assert all(h.score == 0.0 and h.vector is None for h in hits)
    assert hits[0].payload["type"] == "preference"

    with_vec = store.retrieve(coll, [ids["b"]], with_vectors=True)
    assert len(with_vec) == 1 and with_vec[0].vector is not None
    # Cosine collections keep the unit vector.
    assert with_vec[0].vector == pytest.approx(unit(0.8, 0.6, 0.0), abs=FLOAT16)
    assert store.retrieve(coll, []) == []


def test_describe_counts_points_and_names_the_optimizer_state(
    store: QdrantVectorStore, abcd: tuple[str, dict[str, str]], names: NameFactory
) -> None:
    coll, _ = abcd
    state = store.describe(coll)
    assert state is not None and state.points == 4 and state.segments >= 1
    assert 0 <= state.indexed_vectors <= state.points
    # Edge runs no background optimizer; qdrant-client and a server report their status.
    assert state.optimizer == ("none" if isinstance(store, EdgeVectorStore) else "ok")
    assert store.describe(names()) is None


def test_ids_are_canonical_uuids(store: QdrantVectorStore, names: NameFactory) -> None:
    coll = names()
    raw = uuid.uuid4()
    store.upsert(coll, [VectorPoint(str(raw).upper(), [1.0, 0.0], {})])
    assert [h.id for h in store.retrieve(coll, [raw.hex])] == [str(raw)]
    assert [h.id for h in store.search(coll, [1.0, 0.0], limit=1)] == [str(raw)]
    for bad in ("not-a-uuid", "", "42"):
        with pytest.raises(InvalidInput):
            store.upsert(coll, [VectorPoint(bad, [1.0, 0.0], {})])
        with pytest.raises(InvalidInput):
            store.retrieve(coll, [bad])
        with pytest.raises(InvalidInput):
            store.delete(coll, [bad])


def test_count_and_idempotent_upsert(store: QdrantVectorStore, names: NameFactory) -> None:
    coll = names()
    same = point_id("tenant", "user", "message-1", "0")
    store.upsert(coll, [VectorPoint(same, [1.0, 0.0], {"v": 1})])
    store.upsert(coll, [VectorPoint(pid(), [0.0, 1.0], {})])
    assert store.count(coll) == 2
    # A retried task writes the same id again: replaced, not duplicated.
    store.upsert(coll, [VectorPoint(same, [0.6, 0.8], {"v": 2})])
    assert store.count(coll) == 2
    [hit] = store.retrieve(coll, [same], with_vectors=True)
    assert hit.payload == {"v": 2}
    assert hit.vector == pytest.approx([0.6, 0.8], abs=FLOAT16)


def test_drop_and_list(store: QdrantVectorStore, names: NameFactory) -> None:
    first, second = names(), names()
    store.upsert(first, [VectorPoint(pid(), [1.0, 0.0], {})])
    store.ensure_collection(second, 2)
    listed = store.list_collections()
    assert {first, second} <= set(listed)
    assert listed == sorted(listed)

    store.drop_collection(first)
    assert first not in store.list_collections()
    assert store.count(first) == 0
    store.drop_collection(first)  # again: no error
    # Dropping forgets the cached collection: the next upsert creates it afresh.
    store.upsert(first, [VectorPoint(pid(), [0.0, 1.0, 0.0], {})])
    assert store.count(first) == 1


def test_missing_collection(store: QdrantVectorStore, names: NameFactory) -> None:
    missing = names()
    assert store.search(missing, [1.0, 0.0], limit=5) == []
    assert store.search(missing, [1.0, 0.0], limit=5, payload_filter={"type": "fact"}) == []
    assert store.retrieve(missing, [pid()], with_vectors=True) == []
    assert store.count(missing) == 0
    store.delete(missing, [pid()])
    store.drop_collection(missing)
    assert missing not in store.list_collections()


def test_ensure_collection_idempotent_and_dimension_checked(
    store: QdrantVectorStore, names: NameFactory
) -> None:
    coll = names()
    store.ensure_collection(coll, 3)
    store.ensure_collection(coll, 3)
    assert store.count(coll) == 0
    with pytest.raises(PermanentError) as err:
        store.ensure_collection(coll, 4)
    assert err.value.details == {"collection": coll, "expected_dim": 3, "got_dim": 4}
    with pytest.raises(PermanentError):
        store.upsert(coll, [VectorPoint(pid(), [1.0, 0.0], {})])
    with pytest.raises(InvalidInput):
        store.upsert(coll, [VectorPoint(pid(), [1.0, 0.0, 0.0], {}), VectorPoint(pid(), [1.0], {})])
    with pytest.raises(InvalidInput):
        store.upsert(coll, [VectorPoint(pid(), [float("nan"), 0.0, 0.0], {})])
    with pytest.raises(InvalidInput):
        store.ensure_collection(names(), 0)


def test_upsert_nothing_creates_nothing(store: QdrantVectorStore, names: NameFactory) -> None:
    coll = names()
    store.upsert(coll, [])
    assert coll not in store.list_collections()


def test_upsert_recreates_a_collection_dropped_behind_its_back(
    store: QdrantVectorStore, names: NameFactory
) -> None:
    if not isinstance(store, QdrantVectorStore):
        pytest.skip("one process owns an Edge folder: nothing drops a collection behind it")
    coll = names()
    store.upsert(coll, [VectorPoint(pid(), [1.0, 0.0], {})])
    # As if another process dropped it (delete-user) while this store still caches it.
    store._client.delete_collection(coll)
    store.upsert(coll, [VectorPoint(pid(), [1.0, 0.0], {})])
    assert store.count(coll) == 1


def test_concurrent_upserts_and_searches(store: QdrantVectorStore, names: NameFactory) -> None:
    coll = names()
    threads, rounds, per_batch, dim = 16, 20, 3, 8
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        try:
            start.wait()  # all threads hit the missing collection at once: a creation race
            for r in range(rounds):
                batch = [
                    VectorPoint(
                        point_id(str(t), str(r), str(i)),
                        rng.random(dim).astype(np.float32) + 0.01,
                        {"t": t, "r": r},
                    )
                    for i in range(per_batch)
                ]
                store.upsert(coll, batch)
                store.search(coll, rng.random(dim), limit=5, payload_filter={"t": t})
                store.retrieve(coll, [batch[0].id])
                store.count(coll)
        except BaseException as exc:  # collected so the main thread can fail the test
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not errors, errors
    assert store.count(coll) == threads * rounds * per_batch
    for t in (0, threads - 1):
        hits = store.search(coll, np.ones(dim), limit=1000, payload_filter={"t": t})
        assert len(hits) == rounds * per_batch


# -- hybrid: a dense and a BM25 sparse vector a point (message collections, ADR 0013) -------


def words(text: str) -> SparseVector:
    terms = document_terms(text)
    assert terms is not None
    return terms


@pytest.fixture(name="chat")
def chat_fixture(store: QdrantVectorStore, names: NameFactory) -> tuple[str, dict[str, str]]:
    """A collection with sparse vectors: three users' messages, one of them sparse-only."""
    coll = names()
    store.ensure_collection(coll, 3, tenant_field="u", sparse=True, keyword_fields=("session_id",))
    ids = {k: pid() for k in ("sofa", "rex", "thanks", "paris", "other")}
    said = {
        "sofa": ([1.0, 0.0, 0.0], "My dog chewed the green sofa.", "s1"),
        "rex": ([0.8, 0.6, 0.0], "Rex is a good dog; the vet said so.", "s2"),
        "thanks": (None, "ok thanks", "s2"),
        "paris": ([0.0, 1.0, 0.0], "We flew to Paris in May.", "s3"),
    }
    store.upsert(
        coll,
        [
            VectorPoint(ids[k], v, {"u": "ana", "session_id": s}, sparse=words(t))
            for k, (v, t, s) in said.items()
        ]
        + [VectorPoint(ids["other"], [1.0, 0.0, 0.0], {"u": "bo"}, sparse=words("sofa dog"))],
    )
    return coll, ids


def test_hybrid_search_gives_both_ranked_lists(
    store: QdrantVectorStore, chat: tuple[str, dict[str, str]]
) -> None:
    coll, ids = chat
    assert store.has_sparse(coll) is True
    found = store.hybrid_search(
        coll, [1.0, 0.0, 0.0], query_terms("dog sofa"), limit=10, payload_filter={"u": "ana"}
    )
    assert isinstance(found, HybridHits)
    # By meaning: only points with a dense vector, nearest first; by words: BM25.
    assert [h.id for h in found.dense] == [ids["sofa"], ids["rex"], ids["paris"]]
    assert [h.id for h in found.sparse] == [ids["sofa"], ids["rex"]]
    assert found.dense[0].score == pytest.approx(1.0, abs=FLOAT16)
    assert found.sparse[0].score > found.sparse[1].score > 0
    assert all(h.payload == {} for h in [*found.dense, *found.sparse])
    # A sparse-only point is found by its words, never by meaning.
    thanks = store.hybrid_search(
        coll, [1.0, 0.0, 0.0], query_terms("thanks"), limit=10, payload_filter={"u": "ana"}
    )
    assert thanks is not None and [h.id for h in thanks.sparse] == [ids["thanks"]]
    assert ids["thanks"] not in [h.id for h in store.search(coll, [1.0, 0.0, 0.0], limit=10)]
    assert store.hybrid_search(coll, [1.0, 0.0, 0.0], None, limit=0) == HybridHits([], [])


def test_hybrid_search_scores_every_candidate_by_both(
    store: QdrantVectorStore, chat: tuple[str, dict[str, str]]
) -> None:
    """A hit cut from one list (limit 1) still carries its score there, from the second,
    id-filtered pass; one the other list cannot score (no dense vector, no word of the
    query) has none; other users' points never enter."""
    coll, ids = chat
    found = store.hybrid_search(
        coll, [0.0, 1.0, 0.0], query_terms("dog sofa"), limit=1, payload_filter={"u": "ana"}
    )
    assert found is not None
    assert [h.id for h in found.dense] == [ids["paris"]]
    assert [h.id for h in found.sparse] == [ids["sofa"]]
    assert set(found.dense_scores) == {ids["paris"], ids["sofa"]}
    assert found.dense_scores[ids["paris"]] == pytest.approx(1.0, abs=FLOAT16)
    assert found.dense_scores[ids["sofa"]] == pytest.approx(0.0, abs=FLOAT16)
    assert set(found.sparse_scores) <= {ids["sofa"], ids["paris"]}
    assert found.sparse_scores[ids["sofa"]] == pytest.approx(found.sparse[0].score)
    assert found.sparse_scores.get(ids["paris"], 0.0) == 0.0  # no word of the query
    # The rescoring keeps the IDF of the user's own points: the same BM25 as the full list.
    full = store.hybrid_search(
        coll, [0.0, 1.0, 0.0], query_terms("dog sofa"), limit=10, payload_filter={"u": "ana"}
    )
    assert full is not None
    assert full.sparse_scores[ids["rex"]] == pytest.approx(full.sparse[1].score)
    assert ids["other"] not in {*full.dense_scores, *full.sparse_scores}


def test_hybrid_search_leaves_out_what_exclude_matches(
    store: QdrantVectorStore, chat: tuple[str, dict[str, str]]
) -> None:
    coll, ids = chat
    found = store.hybrid_search(
        coll,
        [1.0, 0.0, 0.0],
        query_terms("dog"),
        limit=10,
        payload_filter={"u": "ana"},
        exclude={"session_id": ["s1", "s3"]},
    )
    assert found is not None
    assert [h.id for h in found.dense] == [ids["rex"]]
    assert [h.id for h in found.sparse] == [ids["rex"]]


def test_hybrid_search_takes_idf_over_the_filtered_points(
    store: QdrantVectorStore, names: NameFactory
) -> None:
    """Ana's "apple" is rarer than her "cherry" among her own messages; among everyone's,
    where Bo says apple all the time, it is the other way round."""
    coll, ana = names(), {k: pid() for k in ("apple", "cherry", "cherry pie")}
    store.ensure_collection(coll, 3, tenant_field="u", sparse=True)
    store.upsert(
        coll,
        [VectorPoint(i, [1.0, 0.0, 0.0], {"u": "ana"}, sparse=words(t)) for t, i in ana.items()]
        + [
            VectorPoint(pid(), [0.0, 1.0, 0.0], {"u": "bo"}, sparse=words(f"apple number {n}"))
            for n in range(30)
        ],
    )
    found = store.hybrid_search(
        coll, [1.0, 0.0, 0.0], query_terms("apple cherry"), limit=3, payload_filter={"u": "ana"}
    )
    assert found is not None and found.sparse[0].id == ana["apple"]
    everyone = store.hybrid_search(coll, [1.0, 0.0, 0.0], query_terms("apple cherry"), limit=40)
    assert everyone is not None
    mine = [h.id for h in everyone.sparse if h.id in ana.values()]
    assert mine[0] != ana["apple"]


def test_a_collection_with_sparse_vectors_reads_and_counts_every_point(
    store: QdrantVectorStore, chat: tuple[str, dict[str, str]]
) -> None:
    coll, ids = chat
    assert store.count(coll) == 5 and store.count(coll, payload_filter={"u": "ana"}) == 4
    [sofa, thanks] = store.retrieve(coll, [ids["sofa"], ids["thanks"]], with_vectors=True)
    assert sofa.vector == pytest.approx([1.0, 0.0, 0.0], abs=FLOAT16)
    assert thanks.vector is None and thanks.payload == {"u": "ana", "session_id": "s2"}
    [hit, *_] = store.search(coll, [0.0, 1.0, 0.0], limit=1, payload_filter={"u": "ana"})
    assert hit.id == ids["paris"] and hit.payload["session_id"] == "s3"
    with pytest.raises(InvalidInput, match="dimensions"):
        store.hybrid_search(coll, [1.0, 0.0], query_terms("dog"), limit=3)
    store.delete(coll, [ids["thanks"]], payload_filter={"u": "ana"})
    assert store.count(coll) == 4


def test_a_collection_without_sparse_vectors_keeps_the_dense_ones(
    store: QdrantVectorStore, names: NameFactory
) -> None:
    """A message collection of an earlier tiermem: no hybrid answer, and a write of the new
    form keeps what it can hold (the dense vectors) until `tiermem reindex` remakes it."""
    plain, missing = names(), names()
    store.ensure_collection(plain, 3)
    kept, skipped = pid(), pid()
    store.upsert(
        plain,
        [
            VectorPoint(kept, [1.0, 0.0, 0.0], {}, sparse=words("dog sofa")),
            VectorPoint(skipped, None, {}, sparse=words("ok thanks")),
        ],
    )
    assert store.has_sparse(plain) is False and store.count(plain) == 1
    assert [h.id for h in store.search(plain, [1.0, 0.0, 0.0], limit=5)] == [kept]
    assert store.hybrid_search(plain, [1.0, 0.0, 0.0], query_terms("dog"), limit=5) is None
    assert store.has_sparse(missing) is None
    assert store.hybrid_search(missing, [1.0, 0.0, 0.0], query_terms("dog"), limit=5) is None
    # Sparse-only points cannot say the dimension of a collection they would create.
    with pytest.raises(InvalidInput, match="ensure_collection"):
        store.upsert(missing, [VectorPoint(pid(), None, {}, sparse=words("dog"))])
    with pytest.raises(InvalidInput, match="no vector"):
        store.upsert(plain, [VectorPoint(pid(), None, {})])
    # Points carrying sparse vectors make a collection with them.
    made = names()
    store.upsert(made, [VectorPoint(pid(), [0.0, 0.0, 1.0], {}, sparse=words("dog"))])
    assert store.has_sparse(made) is True


def test_a_collection_remade_with_sparse_vectors_elsewhere_is_seen(
    store: QdrantVectorStore, names: NameFactory
) -> None:
    """`tiermem reindex` in another process remakes a message collection while this store
    still knows it without sparse vectors: a search reads the form again at once, and a
    hybrid search once RECHECK_S has passed."""
    if not isinstance(store, QdrantVectorStore):
        pytest.skip("one process owns an Edge folder: nothing remakes a collection behind it")
    coll, point = names(), pid()
    store.ensure_collection(coll, 3)
    stale = store._known[coll]
    store.drop_collection(coll)
    store.ensure_collection(coll, 3, sparse=True)
    store.upsert(coll, [VectorPoint(point, [1.0, 0.0, 0.0], {}, sparse=words("dog"))])
    store._known[coll] = stale
    assert [h.id for h in store.search(coll, [1.0, 0.0, 0.0], limit=3)] == [point]
    # Known that long ago: as a process sees it RECHECK_S after it last looked.
    store._known[coll] = stale._replace(read_at=stale.read_at - qdrant_store.RECHECK_S - 1)
    found = store.hybrid_search(coll, [1.0, 0.0, 0.0], query_terms("dog"), limit=3)
    assert found is not None and [h.id for h in found.sparse] == [point]


@pytest.mark.parametrize(
    "bad",
    [SparseVector([1, 2], [1.0]), SparseVector([1, 1], [1.0, 2.0]),
     SparseVector([-1], [1.0]), SparseVector([3], [float("inf")])],
)  # fmt: skip
def test_a_malformed_sparse_vector_is_invalid_input(
    store: QdrantVectorStore, names: NameFactory, bad: SparseVector
) -> None:
    with pytest.raises(InvalidInput):
        store.upsert(names(), [VectorPoint(pid(), [1.0, 0.0], {}, sparse=bad)])


def test_close_is_idempotent_and_final(store: QdrantVectorStore) -> None:
    store.close()
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.count("anything")


# -- construction ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"url": "http://localhost:6333", "in_memory": True}])
def test_constructor_needs_exactly_one_target(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="exactly one of url or in_memory"):
        QdrantVectorStore(**kwargs)  # type: ignore[arg-type]


def test_api_key_only_with_url() -> None:
    with pytest.raises(ValueError, match="api_key"):
        QdrantVectorStore(in_memory=True, api_key="k")


def test_unreachable_server_is_unavailable() -> None:
    # Port 1 refuses connections; the constructor itself must not touch the network.
    store = QdrantVectorStore(url="http://127.0.0.1:1")
    try:
        assert store.mode == "server"
        with pytest.raises(Unavailable) as err:
            store.list_collections()
        assert err.value.details == {"url": "http://127.0.0.1:1"}
        with pytest.raises(Unavailable):
            store.upsert("c", [VectorPoint(pid(), [1.0], {})])
    finally:
        store.close()


def _settings(tmp_path: Path, **qdrant: object) -> Settings:
    return Settings(
        _env_file=None,
        data_dir=tmp_path / "data",
        qdrant=QdrantSettings.model_validate(qdrant),
    )


def test_the_settings_choose_the_store(tmp_path: Path) -> None:
    with closing(open_vector_store(_settings(tmp_path, in_memory=True))) as store:
        assert isinstance(store, QdrantVectorStore) and store.mode == "memory"

    with closing(open_vector_store(_settings(tmp_path))) as store:  # Qdrant Edge in the data dir
        assert isinstance(store, EdgeVectorStore) and store.mode == "embedded"
        assert (tmp_path / "data" / "vectors").is_dir()

    nested = tmp_path / "a" / "b" / "vectors"
    with closing(open_vector_store(_settings(tmp_path, path=str(nested)))) as store:
        assert isinstance(store, EdgeVectorStore) and nested.is_dir()

    server = _settings(tmp_path, url="https://127.0.0.1:1", api_key="k")
    with closing(open_vector_store(server)) as store:
        assert isinstance(store, QdrantVectorStore) and store.mode == "server"


# -- naming ------------------------------------------------------------------------------------


def _name(tenant: str, user: str, key: str = "s3cret") -> str:
    return collection_name(secret_key=key, tenant_id=tenant, user_id=user)


def test_collection_name_is_stable_keyed_and_opaque() -> None:
    name = _name("acme", "alice@example.com")
    assert name == _name("acme", "alice@example.com")
    # Pinned: a change here orphans every existing collection.
    digest = hmac.new(b"s3cret", b"acme\x1falice@example.com", hashlib.sha256).hexdigest()
    assert name == "tm_" + digest[:32]
    assert len(name) == 3 + 32 and VALID_COLLECTION.match(name)
    for raw in ("alice", "example", "acme"):
        assert raw not in name

    assert name != _name("other", "alice@example.com")
    assert name != _name("acme", "bob@example.com")
    assert name != _name("acme", "alice@example.com", key="another")
    # Moving the boundary between tenant and user must not give the same name.
    assert _name("ab", "c") != _name("a", "bc")
    custom = collection_name(secret_key="s3cret", tenant_id="acme", user_id="u", prefix="mem_")
    assert custom.startswith("mem_") and VALID_COLLECTION.match(custom)


def test_collection_name_is_accepted_by_qdrant() -> None:
    name = collection_name(secret_key="k", tenant_id="t/1", user_id='u:"*?<>|\\')
    with QdrantVectorStore(in_memory=True) as store:
        store.ensure_collection(name, 2)
        assert store.list_collections() == [name]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"secret_key": "", "tenant_id": "t", "user_id": "u"},
        {"secret_key": "k", "tenant_id": "", "user_id": "u"},
        {"secret_key": "k", "tenant_id": "t", "user_id": ""},
        {"secret_key": "k", "tenant_id": "t\x1fx", "user_id": "u"},
    ],
)
def test_collection_name_rejects_ambiguous_ids(kwargs: dict[str, str]) -> None:
    with pytest.raises(InvalidInput):
        collection_name(**kwargs)


def test_point_id_is_deterministic() -> None:
    a = point_id("tenant", "user", "msg-1", "0")
    assert a == point_id("tenant", "user", "msg-1", "0")
    assert uuid.UUID(a).version == 5 and str(uuid.UUID(a)) == a
    assert a != point_id("tenant", "user", "msg-1", "1")
    assert a != point_id("user", "tenant", "msg-1", "0")
    assert point_id("ab", "c") != point_id("a", "bc")
    assert point_id("a", "") != point_id("a")
    with pytest.raises(InvalidInput):
        point_id()
    with pytest.raises(InvalidInput):
        point_id("a\x1fb")


# -- Qdrant Edge folder ---------------------------------------------------------------------


def test_edge_folder_persists_across_reopen_with_its_tenant_index(
    tmp_path: Path, names: NameFactory
) -> None:
    coll, point = names(), pid()
    store = EdgeVectorStore(path=str(tmp_path / "edge"))
    store.ensure_collection(coll, 3, tenant_field="tm_user")
    store.upsert(coll, [VectorPoint(point, [0.0, 1.0, 0.0], {"tm_user": "u1", "k": "v"})])
    store.close()
    again = EdgeVectorStore(path=str(tmp_path / "edge"))
    try:
        assert again.list_collections() == [coll]
        [hit] = again.search(coll, [0.0, 1.0, 0.0], limit=5, payload_filter={"tm_user": "u1"})
        assert hit.id == point and hit.payload == {"tm_user": "u1", "k": "v"}
        with pytest.raises(PermanentError, match="dimension"):
            again.ensure_collection(coll, 4)
    finally:
        again.close()


def test_a_second_edge_store_on_a_held_folder_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "edge"
    holder = processes.spawn(
        [sys.executable, "-c",
         "import sys, time; from shared.vectors.edge_store import EdgeVectorStore; "
         f"s = EdgeVectorStore(path={str(folder)!r}); print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(Unavailable) as refused:
            EdgeVectorStore(path=str(folder))
        assert str(folder) in refused.value.message and f"pid {holder.pid}" in refused.value.message
    finally:
        holder.kill()
        holder.wait()
    EdgeVectorStore(path=str(folder)).close()  # the lock died with its holder


def test_a_second_store_on_a_folder_this_process_holds_is_refused_with_a_hint(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "edge"
    first = EdgeVectorStore(path=str(folder))
    try:
        with pytest.raises(Unavailable) as err:
            EdgeVectorStore(path=str(folder))
        message = err.value.message
        assert str(folder.resolve()) in message
        assert "another vector store in this same process" in message
        assert "tiermem serve" in message and "TIERMEM_QDRANT__URL" in message
        assert err.value.details["path"] == str(folder.resolve())
        assert err.value.details["holder"]["pid"] == os.getpid()
        assert err.value.code == "unavailable"
    finally:
        first.close()
    assert read_owner(folder) is None  # closing removes the record...
    EdgeVectorStore(path=str(folder)).close()  # ...and releases the folder lock


def test_a_stale_owner_record_does_not_block(tmp_path: Path) -> None:
    """The record only names the holder; the folder's lock decides. A record left by a
    process that died is taken over."""
    folder = tmp_path / "edge"
    folder.mkdir()
    dead = processes.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = FolderOwner(pid=int(dead.stdout), hostname=socket.gethostname(), argv=["gone"])
    record_path(folder).write_text(json.dumps(dataclasses.asdict(stale)))
    assert read_owner(folder) == stale and stale.is_gone()

    store = EdgeVectorStore(path=str(folder))
    try:
        owner = read_owner(folder)
        assert owner is not None and owner.pid == os.getpid()
    finally:
        store.close()


def test_edge_keeps_a_bounded_set_of_shards_open_and_loses_nothing(
    tmp_path: Path, names: NameFactory
) -> None:
    store = EdgeVectorStore(path=str(tmp_path / "edge"), max_open_shards=2)
    try:
        colls = [names() for _ in range(5)]
        for round_ in range(3):  # each round reopens shards the limit closed
            for i, coll in enumerate(colls):
                store.upsert(coll, [VectorPoint(pid(), [1.0, float(i), 0.0], {"r": round_})])
        assert [store.count(c) for c in colls] == [3] * 5
        assert all(len(store.search(c, [1.0, 0.0, 0.0], limit=10)) == 3 for c in colls)
    finally:
        store.close()


def test_edge_closing_a_shard_to_make_room_waits_for_the_call_under_way(
    tmp_path: Path, names: NameFactory
) -> None:
    """So no call meets a shard closed under it, and the points a shard records at close
    are all of them (the next open checks them)."""
    store = EdgeVectorStore(path=str(tmp_path / "edge"), max_open_shards=1)
    try:
        first, second = names(), names()
        store.upsert(first, [VectorPoint(pid(), [1.0, 0.0, 0.0], {})])
        [entry] = store._shards.open.values()
        inside, leave = threading.Event(), threading.Event()
        counted: list[int] = []

        def call_under_way() -> None:
            with entry.in_use():
                inside.set()
                leave.wait(10)
                counted.append(entry.shard.count(qdrant_edge.CountRequest()))

        caller = threading.Thread(target=call_under_way)
        caller.start()
        assert inside.wait(5)
        # Opening a second collection closes the first to make room: it waits.
        opener = threading.Thread(
            target=store.upsert, args=(second, [VectorPoint(pid(), [0.0, 1.0, 0.0], {})])
        )
        opener.start()
        opener.join(0.5)
        assert opener.is_alive()
        leave.set()
        caller.join(10)
        opener.join(10)
        assert counted == [1] and list(store._shards.open) == [second]
        assert store.count(first) == 1  # opened again, its recorded points checked
    finally:
        store.close()


def test_edge_read_of_a_collection_dropped_meanwhile_is_a_missing_collection(
    tmp_path: Path, names: NameFactory
) -> None:
    store = EdgeVectorStore(path=str(tmp_path / "edge"))
    try:
        coll = names()
        store.upsert(coll, [VectorPoint(pid(), [1.0, 0.0, 0.0], {})])
        [entry] = store._shards.open.values()  # what a reader holds when the drop lands
        store.drop_collection(coll)
        with pytest.raises(Exception, match="not initialized"):
            entry.shard.count(qdrant_edge.CountRequest())
        assert store.count(coll) == 0 and store.search(coll, [1.0, 0.0, 0.0], limit=3) == []
    finally:
        store.close()


def _shard_config(folder: Path, coll: str) -> dict[str, Any]:
    return json.loads((folder / coll / "edge_config.json").read_text())


def _segment_storage(folder: Path, coll: str) -> set[tuple[str, str, str]]:
    """(vector storage, datatype, payload storage) of each segment: where the engine keeps
    the data, which only a rebuild changes."""
    found = set()
    for file in (folder / coll / "segments").glob("*/segment.json"):
        config = json.loads(file.read_text())["config"]
        [vectors] = config["vector_data"].values()  # unnamed, or DENSE
        found.add(
            (
                vectors["storage_type"],
                vectors.get("datatype") or "float32",  # absent: the default
                config["payload_storage_type"]["type"],
            )
        )
    return found


def test_edge_placement_is_made_at_creation_and_moved_by_compaction(
    tmp_path: Path, names: NameFactory, caplog: pytest.LogCaptureFixture
) -> None:
    folder, coll, point = tmp_path / "edge", names(), pid()
    store = EdgeVectorStore(path=str(folder), placement="ram")
    store.ensure_collection(coll, 3, tenant_field="tm_user")
    store.upsert(coll, [VectorPoint(point, [0.0, 1.0, 0.0], {"tm_user": "u1"})])
    store.close()
    pinned = {("InRamChunkedMmap", "float16", "in_ram_mmap")}
    assert _segment_storage(folder, coll) == pinned

    again = EdgeVectorStore(path=str(folder), placement="disk")
    try:
        [hit] = again.search(coll, [0.0, 1.0, 0.0], limit=5, payload_filter={"tm_user": "u1"})
        assert hit.id == point
        assert "`tiermem compact` rebuilds them" in caplog.text  # said, not silently ignored
        assert _segment_storage(folder, coll) == pinned  # opening does not move data
        assert again.compact(coll)
        [hit] = again.search(coll, [0.0, 1.0, 0.0], limit=5, payload_filter={"tm_user": "u1"})
        assert hit.id == point and hit.payload == {"tm_user": "u1"}
    finally:
        again.close()
    assert _segment_storage(folder, coll) == {("ChunkedMmap", "float16", "mmap")}
    made = _shard_config(folder, coll)
    assert made["hnsw_config"]["payload_m"] == 16 and made["hnsw_config"]["m"] == 0


def test_edge_opens_a_float32_shard_of_an_earlier_version_as_it_was_made(
    tmp_path: Path, names: NameFactory
) -> None:
    folder, coll, point = tmp_path / "edge", names(), pid()
    folder.mkdir()
    params = qdrant_edge.EdgeVectorParams(size=3, distance=qdrant_edge.Distance.Cosine)
    shard = qdrant_edge.EdgeShard.create(str(folder / coll), qdrant_edge.EdgeConfig(vectors=params))
    shard.update(
        qdrant_edge.UpdateOperation.upsert_points(
            [qdrant_edge.Point(point, [0.6, 0.8, 0.0], {"k": "v"})]
        )
    )
    shard.close()
    store = EdgeVectorStore(path=str(folder))
    try:
        [hit] = store.retrieve(coll, [point], with_vectors=True)
        assert hit.vector == pytest.approx([0.6, 0.8, 0.0], abs=1e-6)  # still float32
        assert {kind for _, kind, _ in _segment_storage(folder, coll)} == {"float32"}
        assert store.compact(coll)  # rebuilt as shards are made today
        [hit] = store.retrieve(coll, [point], with_vectors=True)
        assert hit.vector == pytest.approx([0.6, 0.8, 0.0], abs=FLOAT16)
    finally:
        store.close()
    assert _segment_storage(folder, coll) == {("ChunkedMmap", "float16", "mmap")}


def _sparse_memory(folder: Path, coll: str) -> set[str]:
    """Where each segment keeps its BM25 index (made at creation, moved only by a rebuild)."""
    return {
        json.loads(file.read_text())["config"]["sparse_vector_data"][SPARSE]["index"]["memory"]
        for file in (folder / coll / "segments").glob("*/segment.json")
    }


def test_edge_sparse_shard_keeps_its_indexes_and_is_placed_by_compaction(
    tmp_path: Path, names: NameFactory, caplog: pytest.LogCaptureFixture
) -> None:
    folder, coll, point = tmp_path / "edge", names(), pid()
    store = EdgeVectorStore(path=str(folder), placement="disk")
    store.ensure_collection(coll, 3, tenant_field="u", sparse=True, keyword_fields=("session_id",))
    store.upsert(coll, [VectorPoint(point, [0.0, 1.0, 0.0], {"u": "a"}, sparse=words("dog"))])
    store.close()
    made = _shard_config(folder, coll)
    assert made["vectors"]["dense"]["memory"] == made["sparse_vectors"]["bm25"]["memory"] == "cold"
    assert made["sparse_vectors"]["bm25"]["modifier"] == "idf"
    assert _sparse_memory(folder, coll) == {"cold"}

    again = EdgeVectorStore(path=str(folder), placement="ram")
    try:
        # read from the config alone
        assert again.has_sparse(coll) is True and not again._shards.open
        for _ in ("as made", "compacted"):
            found = again.hybrid_search(
                coll, [0.0, 1.0, 0.0], query_terms("dogs"), limit=3, payload_filter={"u": "a"}
            )
            assert found is not None and [h.id for h in found.sparse] == [point]
            assert [h.id for h in found.dense] == [point]
            [entry] = again._shards.open.values()
            assert set(entry.shard.info().payload_schema) == {"u", "session_id"}
            assert "`tiermem compact` rebuilds them" in caplog.text
            assert again.compact(coll)
    finally:
        again.close()
    assert _segment_storage(folder, coll) == {("InRamChunkedMmap", "float16", "in_ram_mmap")}
    assert _sparse_memory(folder, coll) == {"pinned"}
    # A BM25 index placed otherwise than the dense vectors is rebuilt too.
    moved = ShardSpec.read(folder / coll)
    assert moved.sparse and moved.made_as_today("ram") and not moved.made_as_today("disk")
    assert not dataclasses.replace(moved, sparse_memory="cold").made_as_today("ram")


def test_edge_message_shard_of_an_earlier_version_answers_no_hybrid_query(
    tmp_path: Path, names: NameFactory
) -> None:
    """Made before ADR 0013 (one unnamed vector): searched by meaning as before, no hybrid
    answer (history search then reads SQL), dense vectors still written to it."""
    folder, coll, point = tmp_path / "edge", names(), pid()
    folder.mkdir()
    params = qdrant_edge.EdgeVectorParams(size=3, distance=qdrant_edge.Distance.Cosine)
    shard = qdrant_edge.EdgeShard.create(str(folder / coll), qdrant_edge.EdgeConfig(vectors=params))
    shard.update(
        qdrant_edge.UpdateOperation.upsert_points([qdrant_edge.Point(point, [0.6, 0.8, 0.0], {})])
    )
    shard.close()
    store = EdgeVectorStore(path=str(folder))
    try:
        assert store.has_sparse(coll) is False
        assert store.hybrid_search(coll, [0.6, 0.8, 0.0], query_terms("dog"), limit=3) is None
        fresh = pid()
        store.upsert(coll, [VectorPoint(fresh, [0.0, 0.0, 1.0], {}, sparse=words("dog"))])
        assert [h.id for h in store.search(coll, [0.0, 0.0, 1.0], limit=1)] == [fresh]
        assert store.count(coll) == 2
    finally:
        store.close()
