"""A user's rows as a whole: everything stored about them exported, or deleted; and one of
their sessions' messages, page by page."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, func
from sqlmodel import Session, col, select

from shared.db.models import ChatSession, ExtractionRun, Fact, Message, User
from shared.memory.models import (
    MemoryPublic,
    MessageExported,
    SessionExported,
    SessionMessagesPublic,
    UserExport,
)
from shared.records.events import USER_DELETED, forget_user_events, record_event


def delete_user_rows(session: Session, user: User) -> dict[str, int]:
    """Every SQL row of the user, the user's own last (committed): rows removed, per table.
    Their vectors are the caller's to drop (shared.flows.forget). Their events go too, and
    user.deleted is announced in the same transaction (ADR 0027)."""
    counts: dict[str, int] = {"events": forget_user_events(session, user.id)}
    for table in (Fact, ExtractionRun, Message, ChatSession):
        result = session.execute(delete(table).where(col(table.user_id) == user.id))
        counts[table.__tablename__] = int(result.rowcount or 0)  # type: ignore[attr-defined]
    record_event(
        session,
        tenant_id=user.tenant_id,
        user_id=None,  # not the user's own event: it outlives them
        type_=USER_DELETED,
        data={"user_id": user.external_id, "deleted": dict(counts)},
    )
    session.delete(user)
    session.commit()
    return counts


def export_user(*, session: Session, user: User) -> UserExport:
    """Everything stored about a user (for portability requests)."""
    sessions = session.exec(
        select(ChatSession)
        .where(ChatSession.user_id == user.id)
        .order_by(col(ChatSession.created_at))
    ).all()
    messages = session.exec(
        select(Message)
        .where(Message.user_id == user.id)
        .order_by(col(Message.session_id), col(Message.seq))
    ).all()
    facts = session.exec(
        select(Fact).where(Fact.user_id == user.id).order_by(col(Fact.created_at))
    ).all()
    ext = {s.id: s.external_id for s in sessions}
    return UserExport(
        user_id=user.external_id,
        exported_at=dt.datetime.now(dt.UTC),
        sessions=[
            SessionExported(
                session_id=s.external_id,
                created_at=s.created_at,
                parent_session_id=s.parent_session_id,
            )
            for s in sessions
        ],
        messages=[_exported(m, ext.get(m.session_id)) for m in messages],
        memories=[MemoryPublic.of(f) for f in facts],
    )


def session_messages(
    *, session: Session, chat: ChatSession, limit: int, offset: int, newest_first: bool
) -> SessionMessagesPublic:
    """A page of the session's messages by `seq`, oldest first unless `newest_first`."""
    order = col(Message.seq).desc() if newest_first else col(Message.seq)
    rows = session.exec(
        select(Message)
        .where(Message.session_id == chat.id)
        .order_by(order)
        .offset(offset)
        .limit(limit)
    ).all()
    count = session.exec(
        select(func.count()).select_from(Message).where(Message.session_id == chat.id)
    ).one()
    return SessionMessagesPublic(data=[_exported(m, chat.external_id) for m in rows], count=count)


def _exported(message: Message, session_external_id: str | None) -> MessageExported:
    return MessageExported(
        id=message.id,
        session_id=session_external_id,
        seq=message.seq,
        role=message.role,
        speaker=message.speaker,
        content=message.content,
        created_at=message.created_at,
        external_id=message.external_id,
        extraction_status=message.extraction_status,
    )
