"""The one place a user's vectors are reached. Every read and write of a user's points goes
through their `UserVectors`, which scopes it to that user in either layout (ADR 0011):

- `per_user`: a collection per user, named by a keyed hash of tenant + user;
- `partitioned`: a collection per tenant; every point carries the user's keyed hash in the
  `tm_user` payload field (a keyword index with is_tenant=true, so Qdrant keeps each user's
  points together) and every query, count and delete is filtered on it.

Callers never see a collection name or the user key, so no query can reach another user.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from shared.errors import DamagedCollection
from shared.vectors.base import (
    HybridHits,
    PayloadFilter,
    SparseVector,
    Vector,
    VectorHit,
    VectorPoint,
    VectorStore,
)
from shared.vectors.naming import collection_name, tenant_collection_name, user_key

Layout = Literal["partitioned", "per_user"]
USER_FIELD = "tm_user"
MESSAGES_SUFFIX = "_m"  # a user's message collection: their fact collection + this
Kind = Literal["facts", "messages"]
# History search leaves the current session out by it (a must_not): indexed, that filter
# costs ~0.15 ms; read from each point's payload, ~2 ms (1,500 messages, ADR 0013).
SESSION_FIELD = "session_id"


@dataclass(frozen=True, slots=True)
class UserVectors:
    store: VectorStore
    collection: str
    user_key: str | None  # partitioned: what every point carries and every query filters on
    # Messages: a BM25 sparse vector beside the dense one, for hybrid_search (ADR 0013).
    sparse: bool = False
    keyword_fields: tuple[str, ...] = ()

    def _scoped(self, payload_filter: PayloadFilter | None = None) -> PayloadFilter | None:
        if self.user_key is None:
            return payload_filter
        return {**(payload_filter or {}), USER_FIELD: self.user_key}

    def _unscoped(self, hit: VectorHit) -> VectorHit:
        if self.user_key is None:
            return hit
        payload = {k: v for k, v in hit.payload.items() if k != USER_FIELD}
        return VectorHit(id=hit.id, score=hit.score, payload=payload, vector=hit.vector)

    def ensure(self, dim: int) -> None:
        tenant_field = USER_FIELD if self.user_key is not None else None
        self.store.ensure_collection(
            self.collection,
            dim,
            tenant_field=tenant_field,
            sparse=self.sparse,
            keyword_fields=self.keyword_fields,
        )

    def has_sparse(self) -> bool | None:
        """Whether the collection answers hybrid_search (None: it does not exist yet); one
        made before ADR 0013 does not until `tiermem reindex` remakes it."""
        return self.store.has_sparse(self.collection)

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Points without a dense vector (sparse-only) need the collection made first
        (ensure): they cannot tell its dimension."""
        if not points:
            return
        dense = next((p.vector for p in points if p.vector is not None), None)
        if dense is not None:
            self.ensure(len(dense))
        if self.user_key is not None:
            points = [replace(p, payload={**p.payload, USER_FIELD: self.user_key}) for p in points]
        self.store.upsert(self.collection, points)

    def search(
        self,
        vector: Vector,
        *,
        limit: int,
        score_threshold: float | None = None,
        payload_filter: PayloadFilter | None = None,
    ) -> list[VectorHit]:
        hits = self.store.search(
            self.collection,
            vector,
            limit=limit,
            score_threshold=score_threshold,
            payload_filter=self._scoped(payload_filter),
        )
        return [self._unscoped(h) for h in hits]

    def hybrid_search(
        self,
        dense: Vector,
        sparse: SparseVector | None,
        *,
        limit: int,
        exclude: PayloadFilter | None = None,
    ) -> HybridHits | None:
        """The user's points by meaning and by words, IDF over their own (see the store's);
        None when the collection cannot answer (missing, or made without sparse vectors)."""
        return self.store.hybrid_search(
            self.collection,
            dense,
            sparse,
            limit=limit,
            payload_filter=self._scoped(),
            exclude=exclude,
        )

    def retrieve(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[VectorHit]:
        hits = self.store.retrieve(self.collection, ids, with_vectors=with_vectors)
        if self.user_key is not None:  # ids are unique, but a point of another user is not ours
            hits = [h for h in hits if h.payload.get(USER_FIELD) == self.user_key]
        return [self._unscoped(h) for h in hits]

    def delete(self, ids: Sequence[str]) -> None:
        self.store.delete(self.collection, ids, payload_filter=self._scoped())

    def count(self) -> int:
        return self.store.count(self.collection, payload_filter=self._scoped())

    def drop(self) -> str:
        """Every point of the user (their collection, or their share of the tenant's);
        returns when the disk they held is freed."""
        if self.user_key is None:
            self.store.drop_collection(self.collection)
            return "now (the user's collection was dropped)"
        self.store.delete_where(self.collection, {USER_FIELD: self.user_key})
        return self.store.reclaims_deleted


def user_vectors(
    store: VectorStore,
    *,
    layout: Layout,
    secret_key: str,
    prefix: str,
    tenant_id: str,
    user_id: str,
    kind: Kind,
) -> UserVectors:
    """The user's facts or messages in the layout the settings choose."""
    messages = kind == "messages"
    suffix = MESSAGES_SUFFIX if messages else ""
    fields = (SESSION_FIELD,) if messages else ()
    if layout == "per_user":
        name = collection_name(
            secret_key=secret_key, tenant_id=tenant_id, user_id=user_id, prefix=prefix
        )
        return UserVectors(store, name + suffix, None, messages, fields)
    name = tenant_collection_name(secret_key=secret_key, tenant_id=tenant_id, prefix=prefix)
    key = user_key(secret_key=secret_key, tenant_id=tenant_id, user_id=user_id)
    return UserVectors(store, name + suffix, key, messages, fields)


def layout_of(collection: str, prefix: str) -> Layout | None:
    """Which layout made a collection of ours (None: not one of tiermem's)."""
    if not collection.startswith(prefix):
        return None
    name = collection[len(prefix) :].removesuffix(MESSAGES_SUFFIX)
    hexdigits = set("0123456789abcdef")
    if len(name) == 32 and set(name) <= hexdigits:
        return "per_user"
    if len(name) == 33 and name[0] == "t" and set(name[1:]) <= hexdigits:
        return "partitioned"
    return None


def message_collections_without_sparse(
    store: VectorStore, *, prefix: str, layout: Layout, limit: int | None = None
) -> list[str]:
    """Message collections of this layout made before ADR 0013 (one dense vector, no sparse):
    history search answers from SQL for their users until `tiermem reindex` remakes them.
    `limit`: look at no more than that many collections (each may cost a request)."""
    names = [
        c
        for c, made in tiermem_collections(store, prefix=prefix).items()
        if made == layout and c.endswith(MESSAGES_SUFFIX)
    ]
    return [c for c in names[:limit] if _has_sparse(store, c) is False]


def _has_sparse(store: VectorStore, collection: str) -> bool | None:
    try:
        return store.has_sparse(collection)
    except DamagedCollection:  # neither form can be told; `tiermem reindex` drops it anyway
        return None


def tiermem_collections(store: VectorStore, *, prefix: str) -> dict[str, Layout]:
    """tiermem's collections in the store, each with the layout that made it."""
    return {c: layout for c in store.list_collections() if (layout := layout_of(c, prefix))}


def other_layout_collections(store: VectorStore, *, prefix: str, layout: Layout) -> list[str]:
    """Collections the other layout left: after the layout setting changed, what `tiermem
    reindex` moves into this layout (from SQL) and then drops."""
    return [c for c, made in tiermem_collections(store, prefix=prefix).items() if made != layout]
