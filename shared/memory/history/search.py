"""History search itself: the engine's lists or SQL full-text's, fused, read back from SQL
as the hits clients see, each with its exchange when asked."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Select, bindparam
from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from shared.config import ContextSettings
from shared.db.models import ChatSession, Message, User
from shared.embeddings import Embedder
from shared.errors import Unavailable
from shared.memory.history.collection import holds_words
from shared.memory.history.fulltext import keyword_search, unindexed_keyword_ranks
from shared.memory.history.fusion import (
    Fused,
    fuse_scores,
    reciprocal_rank_fusion,
    with_speakers_named,
)
from shared.memory.models import MAX_AROUND, MessageHit, MessageRef
from shared.vectors import HybridHits, Vector
from shared.vectors.scope import SESSION_FIELD, UserVectors
from shared.vectors.sparse import query_terms

log = logging.getLogger(__name__)

# How deep each side's list goes: deep enough that a message ranked low by one side but high
# by the other is among the candidates, which are then scored by both (ADR 0014). Beyond 40
# a side, a deeper list found nothing more for 10 hits nor for the context's 40 (measured on
# a public chat benchmark), and costs the engine and SQL for every candidate.
MIN_CANDIDATES = 40


def candidate_depth(k: int) -> int:
    return max(k, MIN_CANDIDATES)


# Built once (a context build runs it on every message); "ids" expands to the candidates.
_HIT_COLUMNS: tuple[Any, ...] = (
    col(Message.id),
    col(Message.session_id),
    col(Message.external_id),
    col(Message.role),
    col(Message.speaker),
    col(Message.content),
    col(Message.created_at),
    col(ChatSession.external_id).label("session_external_id"),
)
_HIT_ROWS: Select[*tuple[Any, ...]] = (
    sa_select(*_HIT_COLUMNS)
    .join(ChatSession, col(ChatSession.id) == col(Message.session_id))
    .where(
        col(Message.id).in_(bindparam("ids", expanding=True)),
        col(Message.user_id) == bindparam("user_id"),
    )
)


def search_history(
    *,
    messages: UserVectors | None,
    embedder: Embedder | None,
    context: ContextSettings,
    session: Session,
    user: User,
    query: str,
    k: int = 10,
    query_vector: Vector | None = None,
    exclude_session_id: str | None = None,
) -> list[MessageHit]:
    """The user's k earlier messages most relevant to the query, from any session.

    `messages` is the user's message collection, None when this process cannot reach the
    vector store (the embedded folder is another's): SQL full-text answers alone then, and
    `embedder` may be None too. `exclude_session_id` is an internal session id (the current
    session, whose history the caller shows anyway); `query_vector` saves embedding the
    query a second time when the caller already did. Rows are read from SQL, so a message
    deleted a moment ago is never returned even if its vector lingers.
    """
    if k <= 0 or not query.strip():
        return []
    depth = candidate_depth(k)
    found: HybridHits | None = None
    dense: list[str] = []  # by meaning, for the SQL path
    try:
        if messages is not None:
            found, dense = _engine_lists(
                messages, embedder, query, query_vector, depth, exclude_session_id
            )
    except Unavailable as exc:  # e.g. the embedded folder is another process's
        log.warning("history search without vectors: %s", exc.message, extra={"user_id": user.id})
    if found is None:
        return search_history_in_sql(
            rrf_k=context.rrf_k,
            session=session,
            user=user,
            query=query,
            k=k,
            by_meaning=dense,
            exclude_session_id=exclude_session_id,
        )
    fresh = unindexed_keyword_ranks(
        session=session,
        user_id=user.id,
        query=query,
        limit=depth,
        exclude_session_id=exclude_session_id,
    )
    fused = fuse_scores(found, vector_weight=context.history_vector_weight, fresh=fresh)
    # Every candidate's row (one query): its speaker for the bonus; a deleted one is gone.
    rows = _rows(session, user, [f.message_id for f in fused])
    speakers = {mid: row.speaker for mid, row in rows.items()}
    ranked = with_speakers_named(fused, speakers, query, bonus=context.history_speaker_bonus)[:k]
    return _hits(ranked, rows)


def _engine_lists(
    messages: UserVectors,
    embedder: Embedder | None,
    query: str,
    query_vector: Vector | None,
    depth: int,
    exclude_session_id: str | None,
) -> tuple[HybridHits | None, list[str]]:
    """The engine's dense and BM25 lists in one request; when the collection cannot answer
    them (none yet, or made before sparse vectors), None and its ids nearest by meaning."""
    if query_vector is not None:
        vector = query_vector
    else:
        assert embedder is not None, "search_history needs an embedder or a query_vector"
        vector = embedder.embed([query])[0]
    excluded = {SESSION_FIELD: exclude_session_id} if exclude_session_id else None
    found = messages.hybrid_search(vector, query_terms(query), limit=depth, exclude=excluded)
    if found is not None:
        return found, []
    holds_words(messages)
    # Over-fetch when excluding: such a collection has no session index to filter on; the
    # current session's messages are dropped once their rows are read.
    limit = depth * 2 if exclude_session_id else depth
    return None, [h.id for h in messages.search(vector, limit=limit)]


def with_exchange(
    session: Session, user: User, hits: Sequence[MessageHit], around: int
) -> list[MessageHit]:
    """The hits, each with up to `around` messages before and after it in its session (one
    query for all of them)."""
    if around <= 0 or not hits:
        return list(hits)
    around = min(around, MAX_AROUND)
    spots = session.execute(
        sa_select(col(Message.id), col(Message.session_id), col(Message.seq)).where(
            col(Message.id).in_([h.message_id for h in hits]), col(Message.user_id) == user.id
        )
    ).all()
    where = {r.id: (r.session_id, r.seq) for r in spots}
    wanted = {(sid, seq + d) for sid, seq in where.values() for d in range(-around, around + 1)}
    rows = session.execute(
        sa_select(*_HIT_COLUMNS, col(Message.seq))
        .join(ChatSession, col(ChatSession.id) == col(Message.session_id))
        .where(
            col(Message.session_id).in_({sid for sid, _ in wanted}),
            col(Message.seq).in_({seq for _, seq in wanted}),
            col(Message.user_id) == user.id,
        )
    ).all()
    by_spot = {(r.session_id, r.seq): _ref(r) for r in rows}
    out = []
    for hit in hits:
        if hit.message_id not in where:
            out.append(hit)
            continue
        sid, seq = where[hit.message_id]
        before = [by_spot[(sid, s)] for s in range(seq - around, seq) if (sid, s) in by_spot]
        after = [by_spot[(sid, s)] for s in range(seq + 1, seq + around + 1) if (sid, s) in by_spot]
        out.append(hit.model_copy(update={"before": before, "after": after}))
    return out


def _ref(row: Any) -> MessageRef:
    return MessageRef(**_ref_fields(row))


def _ref_fields(row: Any) -> dict[str, Any]:
    """A row of _HIT_COLUMNS as the fields of the message clients see."""
    return {
        "message_id": row.id,
        "external_id": row.external_id,
        "session_id": row.session_external_id,
        "role": row.role,
        "speaker": row.speaker,
        "content": row.content,
        "created_at": row.created_at,
    }


def search_history_in_sql(
    *,
    rrf_k: int,
    session: Session,
    user: User,
    query: str,
    k: int,
    by_meaning: Sequence[str],
    exclude_session_id: str | None = None,
) -> list[MessageHit]:
    """search_history when the engine cannot answer (ADR 0008's plan): the words' list from
    SQL full-text, fused with `by_meaning` (message ids nearest the query, best first; the
    excluded session's may be among them: dropped here)."""
    depth = candidate_depth(k)
    keyword = keyword_search(
        session=session,
        user_id=user.id,
        query=query,
        limit=depth,
        exclude_session_id=exclude_session_id,
    )
    candidates = list(dict.fromkeys([*keyword, *by_meaning]))
    if not candidates:
        return []
    rows = _rows(session, user, candidates)
    live = [m for m in by_meaning if m in rows and rows[m].session_id != exclude_session_id]
    fused = reciprocal_rank_fusion([m for m in keyword if m in rows], live[:depth], rrf_k=rrf_k)
    return _hits(fused[:k], rows)


def _rows(session: Session, user: User, ids: Sequence[str]) -> dict[str, Any]:
    # Plain column tuples, not ORM objects: hydrating ~80 Message rows per search cost more
    # than the keyword query itself.
    if not ids:
        return {}
    return {r.id: r for r in session.execute(_HIT_ROWS, {"ids": list(ids), "user_id": user.id})}


def _hits(fused: Sequence[Fused], rows: Mapping[str, Any]) -> list[MessageHit]:
    hits: list[MessageHit] = []
    for f in fused:
        row = rows[f.message_id]
        hits.append(
            MessageHit(
                **_ref_fields(row),
                score=round(f.score, 6),
                keyword_rank=f.keyword_rank,
                vector_rank=f.vector_rank,
                keyword_score=None if f.keyword_score is None else round(f.keyword_score, 6),
                vector_score=None if f.vector_score is None else round(f.vector_score, 6),
                speaker_named=f.speaker_named,
            )
        )
    return hits
