"""A turn as POST /turns and the chat flow handle it: built into a checked request, answered
once stored, and a reply stored later linked to its run."""

from __future__ import annotations

from sqlalchemy import update
from sqlmodel import Session, col, select

from shared.config import Settings
from shared.db.models import ExtractionRun, Message, utcnow
from shared.records.ingest import (
    IngestRequest,
    IngestResult,
    NewMessage,
    check_messages,
)
from shared.records.models import MessageIn, TurnAccepted, TurnIn


def turn_messages(turn: TurnIn) -> list[NewMessage]:
    out: list[NewMessage] = []
    for role, msg in (("user", turn.user_message), ("assistant", turn.assistant_message)):
        if msg is None:
            continue
        m = MessageIn(content=msg) if isinstance(msg, str) else msg
        out.append(NewMessage.of(m, role, at=turn.created_at))  # type: ignore[arg-type]
    return out


def turn_request(
    turn: TurnIn, *, tenant_id: str, session_external_id: str, settings: Settings
) -> IngestRequest:
    """A turn as the turn writer stores it; bad input is refused here, before any batch."""
    messages = turn_messages(turn)
    check_messages(messages, settings=settings)
    return IngestRequest(
        tenant_id=tenant_id,
        user_external_id=turn.user_id,
        session_external_id=session_external_id,
        messages=messages,
        extractor=settings.extractor_kind,
    )


def turn_accepted(request: IngestRequest, result: IngestResult) -> TurnAccepted:
    """The answer to a stored turn: its messages and the extraction job queued for it."""
    # A re-sent turn (its user message's external_id stored) answers with the run stored
    # the first time, and the reply stored with it.
    runs = result.runs or result.existing_runs
    run = runs[0] if runs else None
    message_ids = [m.id for m in result.messages]
    reply = run.reply_message_id if run and not result.runs else None
    if reply and reply not in message_ids:
        message_ids.append(reply)
    return TurnAccepted(
        session_id=request.session_external_id,
        user_id=request.user_external_id,
        message_ids=message_ids,
        job_id=run.id if run else None,
        status=run.status if run else "stored",
        extractor=run.extractor if run else request.extractor,
        duplicate=not result.runs and result.duplicates > 0,
    )


def stored_reply(*, session: Session, chat_id: str, seq: int) -> Message | None:
    """The reply stored for the user message at `seq`: the session's next message, when it
    is the assistant's.
    (Not its run's reply: a reply stored after a failed first call comes after the run was
    sent, unlinked.)"""
    return session.exec(
        select(Message).where(
            Message.session_id == chat_id,
            Message.seq == seq + 1,
            Message.role == "assistant",
        )
    ).first()


def attach_reply(*, session: Session, run_id: str, reply_message_id: str) -> bool:
    """Make a stored assistant message the reply of a run opened for the user message alone
    (POST /v1/chat stores the user's message before the chat model answers).

    Only a run no worker has started is changed, atomically; False otherwise (the outbox
    sweeper sent it during a very slow reply), and the reply stays stored without the link.
    """
    stmt = (
        update(ExtractionRun)
        .where(
            col(ExtractionRun.id) == run_id,
            col(ExtractionRun.status) == "pending",
            col(ExtractionRun.reply_message_id).is_(None),
        )
        .values(reply_message_id=reply_message_id, updated_at=utcnow())
    )
    return bool(session.execute(stmt).rowcount)  # type: ignore[attr-defined]
