"""Search a user's earlier messages across sessions, by keyword and meaning: what
GET /v1/users/{id}/history/search and the MCP tool search_history answer."""

from __future__ import annotations

from sqlmodel import Session, select

from shared.db.models import ChatSession, User
from shared.errors import InvalidInput
from shared.inputs import BLANK
from shared.memory.history.search import search_history, with_exchange
from shared.memory.models import MessageHitsPublic
from shared.runtime import Runtime


def search_user_history(
    *,
    runtime: Runtime,
    session: Session,
    user: User,
    query: str,
    k: int = 10,
    exclude_session_external_id: str | None = None,
    around: int = 0,
) -> MessageHitsPublic:
    """The user's best k earlier messages, leaving out one of their sessions by its external
    id, each hit with `around` messages of its exchange. The vector store is opened once
    here; a process that cannot reach it answers from SQL full-text without the model."""
    if not query.strip(BLANK):
        raise InvalidInput("q is blank; send the words or question to search for")
    messages = runtime.messages_if_reachable(tenant_id=user.tenant_id, user_id=user.id)
    hits = search_history(
        messages=messages,
        embedder=runtime.embedder if messages is not None else None,
        context=runtime.settings.context,
        session=session,
        user=user,
        query=query,
        k=k,
        exclude_session_id=_session_id(session, user, exclude_session_external_id),
    )
    hits = with_exchange(session, user, hits, around)
    return MessageHitsPublic(data=hits, count=len(hits))


def _session_id(session: Session, user: User, external_id: str | None) -> str | None:
    """The user's session of that external id; a session of another user, or none at all,
    has nothing here to leave out."""
    if not external_id:
        return None
    return session.exec(
        select(ChatSession.id).where(
            ChatSession.tenant_id == user.tenant_id,
            ChatSession.user_id == user.id,
            ChatSession.external_id == external_id,
        )
    ).first()
