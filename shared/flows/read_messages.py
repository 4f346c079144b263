"""Read a session's stored messages back in order: what a client that keeps its conversation
in tiermem (an agent framework's session, a chat history) needs besides the context."""

from __future__ import annotations

from sqlmodel import Session

from shared.compression.sessions import find_session
from shared.memory.models import SessionMessagesPublic
from shared.memory.user_rows import session_messages


def list_session_messages(
    *,
    session: Session,
    tenant_id: str,
    session_external_id: str,
    limit: int,
    offset: int,
    newest_first: bool,
) -> SessionMessagesPublic:
    """A page of the session's messages and their `count` (NotFound for an unknown session)."""
    chat = find_session(
        session=session, tenant_id=tenant_id, session_external_id=session_external_id
    )
    return session_messages(
        session=session, chat=chat, limit=limit, offset=offset, newest_first=newest_first
    )
