"""Rebuild users' vector collections (facts, messages) and the keyword index from SQL.

A damaged collection (one the store refuses with DamagedCollection) is rebuilt too: a
user's own collection is dropped unopened anyway; a tenant's shared one is dropped whole and
every user of the tenant rebuilt into it, whoever was asked for."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlmodel import Session, col, select

from shared.db.models import Fact, User
from shared.errors import DamagedCollection
from shared.memory.history.fulltext import rebuild_keyword_index
from shared.memory.history.indexing import reindex_messages
from shared.memory.writer import point_payload
from shared.runtime import Runtime
from shared.vectors import VectorPoint
from shared.vectors.scope import message_collections_without_sparse, other_layout_collections

log = logging.getLogger(__name__)


def reindex_user(*, runtime: Runtime, session: Session, user: User, batch: int = 256) -> int:
    """Drop the user's vectors, re-embed every active fact and every message; returns the
    number of fact points."""
    facts = runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id)
    with runtime.user_locks.hold(user.id):
        facts.drop()
        facts.ensure(runtime.embedder.dim)
        rows = session.exec(
            select(Fact)
            .where(Fact.user_id == user.id, col(Fact.valid_to).is_(None))
            .order_by(col(Fact.created_at))
        ).all()
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            vectors = runtime.embedder.embed([r.content for r in chunk])
            facts.upsert(
                [
                    VectorPoint(id=r.id, vector=v, payload=point_payload(r))
                    for r, v in zip(chunk, vectors, strict=True)
                ]
            )
        messages = reindex_messages(
            messages=runtime.messages_of(tenant_id=user.tenant_id, user_id=user.id),
            embedder=runtime.embedder,
            session=session,
            user=user,
        )
    log.info("reindexed user", extra={"user_id": user.id, "facts": len(rows), "messages": messages})
    return len(rows)


def reindex_all(
    *,
    runtime: Runtime,
    session: Session,
    tenant_id: str | None = None,
    user_external_id: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    query = select(User)
    if tenant_id:
        query = query.where(User.tenant_id == tenant_id)
    if user_external_id:
        query = query.where(User.external_id == user_external_id)
    q = runtime.settings.qdrant
    everyone = not (tenant_id or user_external_id)
    if everyone:
        rebuild_keyword_index(session)  # one index for everyone: only on a full reindex
        # Message collections made before sparse vectors are remade, not refilled (a
        # collection's vectors are fixed when it is made): every user in them is rebuilt
        # below, and until then history search answers them from SQL.
        for name in message_collections_without_sparse(
            runtime.vectors, prefix=q.collection_prefix, layout=q.layout
        ):
            runtime.vectors.drop_collection(name)
            log.info("dropped a message collection to remake it", extra={"collection": name})
    elif q.layout == "partitioned" and message_collections_without_sparse(
        runtime.vectors, prefix=q.collection_prefix, layout=q.layout
    ):
        log.warning(
            "a tenant's message collection predates sparse vectors and holds other users "
            "than those rebuilt now: run `tiermem reindex` without --tenant/--user to "
            "remake it (history search answers its users from SQL meanwhile)"
        )
    users = _with_damaged_tenants(runtime, session, list(session.exec(query).all()))
    points = 0
    for user in users:
        points += reindex_user(runtime=runtime, session=session, user=user)
        if progress:
            progress(1)
    if everyone:
        # Everyone is now in the configured layout: what the other one left is a copy.
        for name in other_layout_collections(
            runtime.vectors, prefix=q.collection_prefix, layout=q.layout
        ):
            runtime.vectors.drop_collection(name)
            log.info("dropped a collection of the other layout", extra={"collection": name})
    return len(users), points


def _with_damaged_tenants(runtime: Runtime, session: Session, users: list[User]) -> list[User]:
    """Drop the shared collections of these users' tenants that are damaged; the users to
    rebuild, with every user of those tenants added (their points were in them too)."""
    damaged: set[str] = set()
    for user in {u.tenant_id: u for u in users}.values():  # one user per tenant
        for vectors in (
            runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id),
            runtime.messages_of(tenant_id=user.tenant_id, user_id=user.id),
        ):
            if vectors.user_key is None:  # a collection of their own, dropped unopened
                continue
            try:
                vectors.count()  # opens the collection: a damaged one is refused
            except DamagedCollection:
                log.warning(
                    "dropping damaged vector collection %s: rebuilding every user of its tenant",
                    vectors.collection,
                )
                runtime.vectors.drop_collection(vectors.collection)
                damaged.add(user.tenant_id)
    if not damaged:
        return users
    asked = {u.id for u in users}
    tenants = session.exec(select(User).where(col(User.tenant_id).in_(damaged))).all()
    return [*users, *(u for u in tenants if u.id not in asked)]
