"""Build the context for a turn: resolve the session and its owner, embed the query once, rank the
user's facts, search earlier sessions, read the session's tiers, and pack them into the budget.

Deterministic for the same stored state: every ranking breaks ties by id.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import bindparam
from sqlmodel import Session, col, select

from shared.compression.models import HistoryEntry
from shared.compression.session_history import session_history
from shared.config import ContextSettings
from shared.context.assembly import FactView, assemble, rank_memories
from shared.context.models import (
    ContextPublic,
)
from shared.db.models import ChatSession, Message, User
from shared.errors import Conflict, InvalidInput, NotFound
from shared.memory.guard import screen
from shared.memory.history.search import search_history
from shared.memory.models import MessageHit
from shared.memory.names import session_user_name
from shared.memory.reader import in_third_person
from shared.runtime import Runtime

HISTORY_SCAN_LIMIT = 500  # newest messages considered for the verbatim tier


def build_context(
    *,
    runtime: Runtime,
    session: Session,
    tenant_id: str,
    user_external_id: str | None,
    session_external_id: str,
    query: str | None,
    budget_tokens: int | None,
) -> ContextPublic:
    cfg = runtime.settings.context
    budget = cfg.default_budget_tokens if budget_tokens is None else budget_tokens
    if budget < 0:
        raise InvalidInput("budget_tokens must be 0 or more")
    chat, user = _resolve(session, tenant_id, user_external_id, session_external_id)
    query = (query or "").strip()
    if not query and chat is not None:
        query = _last_user_message(session, chat.id)

    name = (
        session_user_name(session, chat) if chat is not None else (user_external_id or "the user")
    )
    memories: list[tuple[FactView, float]] = []
    hits: list[MessageHit] = []
    quarantined = contradicted = 0
    if user is not None:
        vector = runtime.embedder.embed([in_third_person(query, name)])[0] if query else None
        memories, quarantined, contradicted = rank_memories(
            runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id), session, user, vector, cfg
        )
        if query:
            hits, screened_out = _earlier_messages(runtime, session, user, query, vector, chat, cfg)
            quarantined += screened_out
    history = _history(session, chat, name) if chat is not None else []
    return assemble(
        user=user.external_id if user else (user_external_id or ""),
        session_external_id=session_external_id,
        query=query,
        budget=budget,
        name=name,
        memories=memories,
        hits=hits,
        history=history,
        cfg=cfg,
        quarantined=quarantined,
        contradictions_dropped=contradicted,
    )


# The session and its owner in one statement, built once (see compression.store).
_SESSION_AND_OWNER = (
    select(ChatSession, User)
    .join(User, col(User.id) == col(ChatSession.user_id))
    .where(
        col(ChatSession.tenant_id) == bindparam("tenant_id"),
        col(ChatSession.external_id) == bindparam("session_id"),
    )
)


def _resolve(
    session: Session, tenant_id: str, user_external_id: str | None, session_external_id: str
) -> tuple[ChatSession | None, User | None]:
    found = session.exec(
        _SESSION_AND_OWNER, params={"tenant_id": tenant_id, "session_id": session_external_id}
    ).first()
    chat, user = found if found is not None else (None, None)
    if chat is not None:
        assert user is not None  # the inner join always brings the owner
        if user_external_id and user.external_id != user_external_id:
            raise Conflict(f"session {session_external_id!r} belongs to another user")
    elif user_external_id:
        user = session.exec(
            select(User).where(User.tenant_id == tenant_id, User.external_id == user_external_id)
        ).first()  # a new user has no memories yet: an empty context, not an error
    else:
        raise NotFound(
            f"session {session_external_id!r} not found; pass user_id to get the memories "
            "for a session that has not started yet"
        )
    return chat, user


def _last_user_message(session: Session, chat_id: str) -> str:
    row = session.exec(
        select(Message.content)
        .where(Message.session_id == chat_id, Message.role == "user")
        .order_by(col(Message.seq).desc())
        .limit(1)
    ).first()
    return row or ""


def _earlier_messages(
    runtime: Runtime,
    session: Session,
    user: User,
    query: str,
    vector: np.ndarray | None,
    chat: ChatSession | None,
    cfg: ContextSettings,
) -> tuple[list[MessageHit], int]:

    hits = search_history(
        messages=runtime.messages_if_reachable(tenant_id=user.tenant_id, user_id=user.id),
        embedder=runtime.embedder,
        context=cfg,
        session=session,
        user=user,
        query=query,
        k=cfg.max_earlier_messages,
        query_vector=vector,
        exclude_session_id=chat.id if chat else None,
    )
    clean = [h for h in hits if screen(h.content, source="message") is None]
    return clean, len(hits) - len(clean)


def _history(session: Session, chat: ChatSession, name: str) -> list[HistoryEntry]:
    # The session's tiers, oldest first: pinned head, bulks, topics (summaries as "system"
    # entries), then the newest messages verbatim.
    return session_history(session, chat, current_limit=HISTORY_SCAN_LIMIT, user_name=name)
