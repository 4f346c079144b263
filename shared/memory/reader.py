"""Reading and searching one user's memories."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from sqlmodel import Session, col, func, select

from shared.db.models import ChatSession, Fact, Message, User
from shared.embeddings import Embedder
from shared.errors import NotFound
from shared.extraction.schemas import FactType
from shared.memory.models import MemoriesPublic, MemoryPublic, MessageRef
from shared.memory.names import display_name
from shared.vectors.scope import UserVectors

# Sources shown per memory: the newest; a fact mentioned a hundred times keeps every id in
# source_message_ids, but a client showing provenance wants a few.
MAX_SOURCES = 5


def message_refs(
    session: Session, message_ids: Collection[str], user_ids: Collection[str]
) -> dict[str, MessageRef]:
    """message id → the message as clients see it; only these users' (a deleted one is absent)."""
    found = session.exec(
        select(Message, ChatSession.external_id)
        .join(ChatSession, col(ChatSession.id) == col(Message.session_id))
        .where(col(Message.id).in_(message_ids), col(Message.user_id).in_(user_ids))
    ).all()
    return {m.id: MessageRef.of(m, chat_id) for m, chat_id in found}


def sources_of(session: Session, rows: Sequence[Fact]) -> dict[str, list[MessageRef]]:
    """fact id → its newest source messages (one query for all the rows)."""
    wanted = {r.id: list(dict.fromkeys(r.source_message_ids))[-MAX_SOURCES:] for r in rows}
    ids = {mid for mids in wanted.values() for mid in mids}
    if not ids:
        return {}
    by_id = message_refs(session, ids, {r.user_id for r in rows})
    return {fid: [by_id[m] for m in mids if m in by_id] for fid, mids in wanted.items()}


def memories_public(
    session: Session, rows: Sequence[Fact], scores: dict[str, float] | None = None
) -> list[MemoryPublic]:
    sources = sources_of(session, rows)
    return [MemoryPublic.of(r, (scores or {}).get(r.id), sources.get(r.id)) for r in rows]


def list_memories(
    *,
    session: Session,
    user: User,
    types: Sequence[FactType] = (),
    include_superseded: bool = False,
    quarantined: bool | None = None,
    limit: int = 100,
    offset: int = 0,
) -> MemoriesPublic:
    """`quarantined`: True lists only facts the injection guard holds back, False only the
    others, None both."""
    query = select(Fact).where(Fact.user_id == user.id)
    if types:
        query = query.where(col(Fact.type).in_(types))
    if quarantined is not None:
        reason = col(Fact.quarantine_reason)
        query = query.where(reason.is_not(None) if quarantined else reason.is_(None))
    if not include_superseded:
        query = query.where(col(Fact.valid_to).is_(None))
    total = session.exec(select(func.count()).select_from(query.subquery())).one()
    rows = session.exec(
        query.order_by(col(Fact.last_seen_at).desc(), col(Fact.id)).offset(offset).limit(limit)
    ).all()
    return MemoriesPublic(data=memories_public(session, rows), count=int(total))


_FIRST_PERSON = [
    (re.compile(r"\b(do|am|was|have|did|can|should|will|would)\s+I\b", re.I), None),
    (re.compile(r"\bI'm\b|\bI am\b", re.I), "{name} is"),
    (re.compile(r"\bI've\b", re.I), "{name} has"),
    (re.compile(r"\b(my|mine)\b", re.I), "{name}'s"),
    (re.compile(r"\b(I|me|myself)\b"), "{name}"),
]


_ASKS_ABOUT_ME = re.compile(r"\b(?:I|I'm|I've|me|my|mine|myself)\b", re.I)


def in_third_person(query: str, name: str) -> str:
    """Facts are stored as third-person sentences naming the person ("Ana lives in Berlin"),
    and MiniLM puts "Where do I live?" far from them (cosine 0.20, vs 0.79 for "Where does
    Ana live?"), so the query is rewritten before it is embedded."""
    if not name:
        return query
    text = _FIRST_PERSON[0][0].sub(lambda m: f"{m.group(1)} {name}", query)
    for pattern, template in _FIRST_PERSON[1:]:
        assert template is not None
        text = pattern.sub(template.format(name=name), text)
    return text


def search_memories(
    *,
    embedder: Embedder,
    facts: UserVectors,
    session: Session,
    user: User,
    query: str,
    k: int = 10,
    types: Sequence[FactType] = (),
    min_score: float | None = None,
) -> MemoriesPublic:
    """Vector search in the user's own collection; rows come from SQL, so a fact deleted or
    superseded a moment ago is never returned even if its point lingers. A first-person query
    ("Where do I live?") is put in the words the facts use ("Where do Ana live?"), as the
    context builder does."""
    name = display_name(session, user.id) if _ASKS_ABOUT_ME.search(query) else None
    vector = embedder.embed([in_third_person(query, name) if name else query])[0]
    # Over-fetch when filtering by type in Python: a payload filter costs ~10x in embedded mode.
    limit = k * 4 if types else k
    hits = facts.search(vector, limit=limit, score_threshold=min_score)
    if types:
        hits = [h for h in hits if h.payload.get("type") in types]
    scores = {h.id: h.score for h in hits}
    rows = session.exec(
        select(Fact).where(col(Fact.id).in_(list(scores)), col(Fact.valid_to).is_(None))
    ).all()
    ranked = sorted(rows, key=lambda r: scores[r.id], reverse=True)[:k]
    return MemoriesPublic(data=memories_public(session, ranked, scores), count=len(ranked))


def get_memory(*, session: Session, user: User, memory_id: str) -> Fact:
    row = session.get(Fact, memory_id)
    if row is None or row.user_id != user.id:
        raise NotFound(f"memory {memory_id} not found for this user")
    return row
