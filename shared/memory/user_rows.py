"""A user's rows as a whole: everything stored about them exported, or deleted."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete
from sqlmodel import Session, col, select

from shared.db.models import ChatSession, ExtractionRun, Fact, Message, User
from shared.memory.models import MemoryPublic, MessageExported, SessionExported, UserExport
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
        messages=[
            MessageExported(
                id=m.id,
                session_id=ext.get(m.session_id),
                seq=m.seq,
                role=m.role,
                speaker=m.speaker,
                content=m.content,
                created_at=m.created_at,
                external_id=m.external_id,
                extraction_status=m.extraction_status,
            )
            for m in messages
        ],
        memories=[MemoryPublic.of(f) for f in facts],
    )
