"""What the LLM extractor reads beside a turn: the session's messages before it, and the
person's active facts nearest it. Context only: facts still come from the turn alone."""

from __future__ import annotations

from sqlmodel import Session, col, select

from shared.db.models import Fact, Message
from shared.embeddings.base import Embedder
from shared.extraction.base import KnownFact
from shared.tokens import count_tokens
from shared.vectors.scope import UserVectors

# One long message must not take the whole budget: each is cut to this many characters.
_MESSAGE_CHARS = 600


def earlier_messages(
    session: Session,
    message: Message,
    *,
    user_speaker: str,
    limit: int,
    max_tokens: int,
) -> tuple[tuple[str, str], ...]:
    """The session's last `limit` messages before `message` that fit in `max_tokens`, oldest
    first, each as (speaker, text); the person is named as the turn names them."""
    if limit <= 0 or max_tokens <= 0:
        return ()
    rows = session.exec(
        select(Message)
        .where(Message.session_id == message.session_id, col(Message.seq) < message.seq)
        .order_by(col(Message.seq).desc())
        .limit(limit)
    ).all()
    picked: list[tuple[str, str]] = []
    spent = 0
    for row in rows:  # newest first: the nearest messages matter most
        who = user_speaker if row.role == "user" else (row.speaker or "Assistant")
        text = " ".join(row.content.split())[:_MESSAGE_CHARS]
        spent += count_tokens(f"{who}: {text}")
        if spent > max_tokens:
            break
        picked.append((who, text))
    return tuple(reversed(picked))


def known_facts(
    session: Session,
    *,
    facts: UserVectors,
    embedder: Embedder,
    user_id: str,
    text: str,
    limit: int,
) -> tuple[KnownFact, ...]:
    """The user's active facts nearest `text` by meaning, best first (quarantined ones never:
    they must not reach a prompt)."""
    if limit <= 0 or not text.strip():
        return ()
    hits = facts.search(embedder.embed([text])[0], limit=limit)
    if not hits:
        return ()
    rank = {hit.id: i for i, hit in enumerate(hits)}
    rows = session.exec(
        select(Fact).where(
            col(Fact.id).in_(list(rank)),
            Fact.user_id == user_id,
            col(Fact.valid_to).is_(None),
            col(Fact.quarantine_reason).is_(None),
        )
    ).all()
    return tuple(_known(row) for row in sorted(rows, key=lambda r: rank[r.id]))


def _known(row: Fact) -> KnownFact:
    details = row.details or {}
    attribute = details.get("attribute") or details.get("topic") or details.get("goal")
    value = details.get("value") or details.get("choice") or details.get("person")
    return KnownFact(
        type=row.type,
        content=row.content,
        attribute=str(attribute) if attribute else None,
        value=str(value) if value else None,
        id=row.id,
        ended=bool(details.get("ended")),
        slot=row.slot,
        sentiment=str(details["sentiment"]) if details.get("sentiment") else None,
        status=str(details["status"]) if details.get("status") else None,
    )
