"""No query reaches another user's points, in either layout: a property test over random
tenants, users and point ids, through the one scoping place (shared.vectors.scope)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.vectors import VectorPoint
from shared.vectors.qdrant_store import QdrantVectorStore
from shared.vectors.scope import USER_FIELD, Kind, Layout, UserVectors, user_vectors
from shared.vectors.sparse import document_terms, query_terms

DIM = 8
ids = st.text(alphabet="abcdefghij0123456789._:@-", min_size=1, max_size=12)
# (tenant, user) → how many points; the same user id may appear under two tenants.
worlds = st.dictionaries(st.tuples(st.sampled_from(["t1", "t2", "t3"]), ids), st.integers(1, 4),
                         min_size=2, max_size=6)  # fmt: skip


@pytest.fixture(name="store", scope="module")
def store_fixture() -> Iterator[QdrantVectorStore]:
    store = QdrantVectorStore(in_memory=True)
    yield store
    store.close()


def space(
    store: QdrantVectorStore, layout: Layout, tenant: str, user: str, kind: Kind = "facts"
) -> UserVectors:
    return user_vectors(store, layout=layout, secret_key="k" * 32, prefix=f"iso_{layout}_",
                        tenant_id=tenant, user_id=user, kind=kind)  # fmt: skip


@pytest.mark.parametrize("kind", ["facts", "messages"])
@pytest.mark.parametrize("layout", ["partitioned", "per_user"])
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(world=worlds, seed=st.integers(0, 2**16))
def test_no_query_returns_another_users_point(
    store: QdrantVectorStore,
    layout: Layout,
    kind: Kind,
    world: dict[tuple[str, str], int],
    seed: int,
) -> None:
    for name in store.list_collections():
        store.drop_collection(name)
    rng = np.random.default_rng(seed)
    owned: dict[tuple[str, str], set[str]] = {}
    for (tenant, user), n in world.items():
        # Messages carry a sparse vector too: every one holds the word "parrot".
        sparse = document_terms("a parrot") if kind == "messages" else None
        points = [VectorPoint(id=str(uuid.uuid4()), vector=rng.normal(size=DIM), payload={"n": i},
                              sparse=sparse) for i in range(n)]  # fmt: skip
        space(store, layout, tenant, user, kind).upsert(points)
        owned[(tenant, user)] = {p.id for p in points}
    every_id = [i for points in owned.values() for i in points]

    for who, mine in owned.items():
        me = space(store, layout, *who, kind)
        hits = me.search(rng.normal(size=DIM), limit=100)
        assert {h.id for h in hits} == mine
        assert all(USER_FIELD not in h.payload for h in hits)  # the key never leaks out
        assert {h.id for h in me.retrieve(every_id)} == mine
        assert me.count() == len(mine)
        found = me.hybrid_search(rng.normal(size=DIM), query_terms("parrot"), limit=100)
        if kind == "messages":
            assert found is not None
            assert {h.id for h in found.dense} == {h.id for h in found.sparse} == mine
        else:
            assert found is None  # facts have no sparse vectors

    # A user deleting every id there is, then dropping everything, touches only their own.
    (first, mine), *rest = owned.items()
    me = space(store, layout, *first, kind)
    me.delete(every_id)
    assert me.count() == 0
    me.drop()
    for who, theirs in rest:
        assert space(store, layout, *who, kind).count() == len(theirs)
