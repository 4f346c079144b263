"""What a user is called: the one rule every part uses (facts, the context's prompt, history
lines, compressed history, first-person search), and the label a message is shown under."""

from __future__ import annotations

from sqlalchemy import bindparam, text
from sqlmodel import Session, col, select

from shared.db.models import ChatSession, Fact
from shared.extraction.base import GENERIC_SPEAKERS, is_generic_speaker

# The speaker of a session's latest user message that names one (not the API's default).
_SESSION_SPEAKER = text(
    """
    SELECT m.speaker FROM messages AS m
    WHERE m.session_id = :chat_id AND m.role = 'user' AND m.speaker IS NOT NULL
      AND lower(m.speaker) NOT IN :generic
    ORDER BY m.seq DESC LIMIT 1
    """
).bindparams(bindparam("generic", value=GENERIC_SPEAKERS, expanding=True))
_LATEST_SESSION = text(
    "SELECT s.id FROM chat_sessions AS s WHERE s.user_id = :user_id "
    "ORDER BY s.updated_at DESC, s.id LIMIT 1"
)


def display_name(
    session: Session, user_id: str, *, chat_id: str | None = None, speaker: str | None = None
) -> str | None:
    """What the user is called: the speaker a message names, else the latest one
    their session (`chat_id`, else their latest session) names, else the name they gave
    themself ("hi, I'm Tom btw": their active identity/name fact); None when none is known."""
    if speaker and not is_generic_speaker(speaker):
        return speaker.strip()
    chat_id = chat_id or session.execute(_LATEST_SESSION, {"user_id": user_id}).scalar()
    named = session.execute(_SESSION_SPEAKER, {"chat_id": chat_id}).scalar() if chat_id else None
    return str(named) if named else introduced_name(session, user_id)


def introduced_name(session: Session, user_id: str) -> str | None:
    """The name the user gave themself ("I'm Ben", "my name is Chloe"): their active `name`
    fact."""
    details = session.exec(
        select(Fact.details).where(
            Fact.user_id == user_id,
            Fact.slot == "identity/name",
            col(Fact.valid_to).is_(None),
            col(Fact.quarantine_reason).is_(None),
        )
    ).first()
    value = (details or {}).get("value")
    return str(value) if value else None


def session_user_name(session: Session, chat: ChatSession) -> str:
    """The user's name for the session's messages without a speaker: `display_name`, or
    "the user" while none is known."""
    return display_name(session, chat.user_id, chat_id=chat.id) or "the user"


def message_label(role: str, speaker: str | None, name: str) -> str:
    """The speaker a message is shown under: the speaker it names, else `name` (the user's
    display name) for the user's messages, else its role ("Assistant")."""
    if speaker:
        return speaker
    return name if role == "user" else role.capitalize()
