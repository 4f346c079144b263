"""A tenant's users by the id their client gives: found, or created on first use; listed
with their sessions for the memory browser."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, func, select

from shared.db.models import ChatSession, Fact, Message, User
from shared.errors import NotFound
from shared.records.ingest import get_or_create_user
from shared.records.models import SessionList, SessionSummary, UserList, UserSummary


def user_for(*, session: Session, tenant_id: str, user_external_id: str) -> User:
    """The tenant's user by their id, created (not committed) when new."""
    user_id = get_or_create_user(session, tenant_id, user_external_id)
    user = session.get(User, user_id)
    assert user is not None
    return user


def find_user(*, session: Session, tenant_id: str, user_external_id: str) -> User:
    user = session.exec(
        select(User).where(User.tenant_id == tenant_id, User.external_id == user_external_id)
    ).first()
    if user is None:
        raise NotFound(
            f"user {user_external_id!r} not found", details={"user_id": user_external_id}
        )
    return user


def list_users(
    *, session: Session, tenant_id: str, id_contains: str | None, limit: int, offset: int
) -> UserList:
    """The tenant's users whose id contains `id_contains` (any case; None: all), most recently
    active first. Counted per page row, so a tenant of a million users costs one page."""
    where: list[Any] = [User.tenant_id == tenant_id]
    if id_contains:
        lowered = func.lower(col(User.external_id))
        where.append(lowered.contains(id_contains.lower(), autoescape=True))
    total = session.exec(select(func.count()).select_from(User).where(*where)).one()
    last_said = (
        select(func.max(Message.created_at)).where(Message.user_id == User.id).scalar_subquery()
    )
    rows = session.exec(
        select(User, last_said)
        .where(*where)
        .order_by(last_said.desc().nulls_last(), col(User.external_id))
        .offset(offset)
        .limit(limit)
    ).all()
    ids = [user.id for user, _ in rows]
    sessions = _count_by(session, ChatSession.user_id, ids)
    messages = _count_by(session, Message.user_id, ids)
    active = _count_by(session, Fact.user_id, ids, col(Fact.valid_to).is_(None))
    data = [
        UserSummary(
            user_id=user.external_id,
            created_at=user.created_at,
            sessions=sessions.get(user.id, 0),
            messages=messages.get(user.id, 0),
            memories_active=active.get(user.id, 0),
            last_message_at=last,
        )
        for user, last in rows
    ]
    return UserList(data=data, count=int(total))


def _count_by(session: Session, key: Any, keys: list[str], *where: Any) -> dict[str, int]:
    """How many rows of `key`'s table each of `keys` has (one grouped query)."""
    if not keys:
        return {}
    column = col(key)
    rows = session.exec(
        select(column, func.count()).where(column.in_(keys), *where).group_by(column)
    ).all()
    return {k: int(n) for k, n in rows}


def sessions_of(*, session: Session, user: User, limit: int, offset: int) -> SessionList:
    """The user's sessions, most recently written first, each with its message count."""
    query = select(ChatSession).where(ChatSession.user_id == user.id)
    total = session.exec(select(func.count()).select_from(query.subquery())).one()
    chats = session.exec(
        query.order_by(col(ChatSession.updated_at).desc(), col(ChatSession.external_id))
        .offset(offset)
        .limit(limit)
    ).all()
    counts = _count_by(session, Message.session_id, [c.id for c in chats])
    parents = _external_ids(session, [c.parent_session_id for c in chats if c.parent_session_id])
    data = [
        SessionSummary(
            session_id=c.external_id,
            parent_session_id=parents.get(c.parent_session_id or ""),
            created_at=c.created_at,
            updated_at=c.updated_at,
            messages=counts.get(c.id, 0),
        )
        for c in chats
    ]
    return SessionList(data=data, count=int(total))


def _external_ids(session: Session, chat_ids: list[str]) -> dict[str, str]:
    if not chat_ids:
        return {}
    rows = session.exec(
        select(ChatSession.id, ChatSession.external_id).where(col(ChatSession.id).in_(chat_ids))
    ).all()
    return dict(rows)
