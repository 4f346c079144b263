"""Forgetting: one memory of a user, or the user with everything stored about them."""

from __future__ import annotations

from sqlmodel import Session

from shared.db.models import User
from shared.memory.models import UserDeleted
from shared.memory.reader import get_memory
from shared.memory.user_rows import delete_user_rows
from shared.records.events import MEMORY_DELETED, fact_object, record_event
from shared.runtime import Runtime


def delete_memory(*, runtime: Runtime, session: Session, user: User, memory_id: str) -> None:
    row = get_memory(session=session, user=user, memory_id=memory_id)
    facts = runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id)  # unavailable: no change
    # Facts it superseded keep pointing at nothing: they stay retired (the user asked to forget).
    record_event(
        session,
        tenant_id=user.tenant_id,
        user_id=user.id,
        type_=MEMORY_DELETED,
        data={"memory": fact_object(row)},
    )
    session.delete(row)
    session.commit()
    facts.delete([memory_id])


def delete_user(*, runtime: Runtime, session: Session, user: User) -> UserDeleted:
    """Every SQL row of the user, then every vector of theirs (a rebuild would find nothing)."""
    spaces = (
        runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id),
        runtime.messages_of(tenant_id=user.tenant_id, user_id=user.id),
    )  # opened first: if the store is unavailable, nothing is changed
    # Under the user's lock: an extraction finishing meanwhile cannot re-add a fact.
    with runtime.user_locks.hold(user.id):
        counts = delete_user_rows(session, user)
        reclaimed = [space.drop() for space in spaces]
    return UserDeleted(deleted=counts, disk_reclaimed=reclaimed[0])
