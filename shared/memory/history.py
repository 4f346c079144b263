"""History search: a user's earlier messages by keyword (full-text) and meaning (vectors), fused.

Keywords: SQLite FTS5 (bm25) or PostgreSQL full-text (ts_rank) over `messages.content`,
see migration 0003. Meaning: each user/assistant message embedded as
"(8 May 2023) Ana: <content>" into the user's message collection
(`Runtime.messages_of`, point id = message id) by the extraction worker.
The two ranked lists are fused with reciprocal rank fusion: on long chat histories keyword
search wins single-hop and date questions, vectors win paraphrases, and their top lists
overlap little, so the fusion beats either alone (measured on a public multi-session
chat benchmark).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Select, bindparam, text
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from shared.context.models import MessageHit
from shared.db.models import ChatSession, Message, User
from shared.embeddings import CachedEmbedder, Vectors
from shared.errors import Unavailable
from shared.extraction.prefilter import is_small_talk
from shared.runtime import Runtime
from shared.vectors import Vector, VectorPoint

log = logging.getLogger(__name__)

# Each side contributes this many candidates per result asked for: deep enough that a
# message ranked low by one side but high by the other still meets itself in the fusion.
CANDIDATES_PER_RESULT = 4
MAX_QUERY_TERMS = 32  # a 4000-character query must not become a 600-term OR
INDEXED_ROLES = ("user", "assistant")

# Words that carry no topic, dropped from keyword queries: ORed, "what did I say about my
# pet" would otherwise match nearly every message and rank them all. PostgreSQL's english
# configuration drops its own list; this one is for FTS5, which has none.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves i'm i've i'd i'll it's that's don't didn't doesn't isn't wasn't
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# A term: letters/digits, with inner hyphens, dots or apostrophes kept ("INC-40213", "e.g",
# "don't"), so that such a term is searched as a phrase rather than as loose parts.
_TERM = re.compile(r"\w+(?:[-.'\u2019]\w+)*")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


class MessageHitsPublic(BaseModel):
    data: list[MessageHit]
    count: int


# -- indexing (worker side) ----------------------------------------------------------------


def index_text(message: Message) -> str:
    """What is embedded for a message: its date and speaker, then its text.

    The date prefix measurably helps questions about when something was said; month names
    are spelled here rather than by strftime, whose names follow the process locale.
    """
    when = message.created_at
    speaker = message.speaker or ("User" if message.role == "user" else "Assistant")
    return f"({when.day} {_MONTHS[when.month - 1]} {when.year}) {speaker}: {message.content}"


def is_indexable(message: Message) -> bool:
    """User and assistant messages, except small talk: "thanks!" and "ok" say nothing worth
    finding and, being short and generic, would sit close to many vague queries. Keyword
    search still covers every message."""
    return message.role in INDEXED_ROLES and not is_small_talk(message.content)


def _embed_uncached(runtime: Runtime, texts: Sequence[str]) -> Vectors:
    # Each message is embedded once: kept in the LRU it would only push out the query
    # embeddings the cache is there for (the context builder embeds every query).
    embedder = runtime.embedder
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    return inner.embed(texts)


def _point(message: Message, vector: Vector) -> VectorPoint:
    # session_id is the internal id: payload values are never shown to clients.
    return VectorPoint(
        id=message.id,
        vector=vector,
        payload={
            "session_id": message.session_id,
            "created_at": message.created_at.isoformat(),
            "role": message.role,
        },
    )


def index_messages(
    *, runtime: Runtime, tenant_id: str, user_id: str, message_ids: Sequence[str]
) -> int:
    """Embed the given messages (one embed call) into the user's message collection.

    Idempotent: the point id is the message id. The embedding runs before the user's lock
    is taken (it is the slow part); under the lock the rows are looked up again, so a
    message or user deleted meanwhile (delete_user holds the same lock) cannot come back
    as a point. Returns the number of points written.
    """
    wanted = [i for i in message_ids if i]
    if not wanted:
        return 0
    with Session(runtime.read_engine) as session:
        found = session.exec(
            select(Message)
            .where(col(Message.id).in_(wanted), Message.user_id == user_id)
            .order_by(col(Message.seq))
        ).all()
    rows = [r for r in found if is_indexable(r)]
    if not rows:
        return 0
    vectors = _embed_uncached(runtime, [index_text(r) for r in rows])
    messages = runtime.messages_of(tenant_id=tenant_id, user_id=user_id)
    with runtime.user_locks.hold(user_id):
        with Session(runtime.read_engine) as session:
            present = set(
                session.exec(
                    select(Message.id).where(
                        col(Message.id).in_([r.id for r in rows]), Message.user_id == user_id
                    )
                ).all()
            )
        points = [_point(r, v) for r, v in zip(rows, vectors, strict=True) if r.id in present]
        if points:
            messages.upsert(points)
    return len(points)


def reindex_messages(*, runtime: Runtime, session: Session, user: User, batch: int = 256) -> int:
    """Rebuild the user's message collection from SQL; the caller holds the user's lock."""
    messages = runtime.messages_of(tenant_id=user.tenant_id, user_id=user.id)
    messages.drop()
    messages.ensure(runtime.embedder.dim)
    rows = [
        r
        for r in session.exec(
            select(Message)
            .where(Message.user_id == user.id)
            .order_by(col(Message.created_at), col(Message.id))
        ).all()
        if is_indexable(r)
    ]
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        vectors = _embed_uncached(runtime, [index_text(r) for r in chunk])
        messages.upsert([_point(r, v) for r, v in zip(chunk, vectors, strict=True)])
    return len(rows)


def rebuild_keyword_index(session: Session) -> None:
    """Re-derive SQLite's FTS5 index from `messages` (after a VACUUM or a table rebuild that
    renumbered rowids); PostgreSQL's generated column cannot drift, so it needs nothing."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(text("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')"))
        session.commit()


# -- searching -----------------------------------------------------------------------------


def keyword_terms(query: str) -> list[str]:
    """The query's distinct topical words, lowercased; none for a query of only stopwords
    (as PostgreSQL's english configuration does, so both dialects agree)."""
    terms = dict.fromkeys(t.lower() for t in _TERM.findall(query))
    return [t for t in terms if t not in _STOPWORDS][:MAX_QUERY_TERMS]


def _fts5_string(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def fts5_match(terms: Sequence[str], *, user_id: str) -> str:
    """An FTS5 MATCH expression from plain words, for one user's messages.

    Each word is a quoted string, so operators (AND, OR, NOT, NEAR), column filters, '*'
    and brackets in user text are only text; ORed, so a message holding some of the words
    still matches (bm25 ranks by how many and how rare). The words are confined to the
    content column, the user's id to the user_id column.
    """
    words = " OR ".join(_fts5_string(t) for t in terms)
    return f"user_id : {_fts5_string(user_id)} AND content : ({words})"


def websearch_text(terms: Sequence[str]) -> str:
    """Input for PostgreSQL's websearch_to_tsquery (which never raises on syntax): quoted
    words joined by `or`, the same any-word semantics as the FTS5 side (its default is
    all-words, which would miss most natural-language questions)."""
    return " or ".join('"' + t.replace('"', " ") + '"' for t in terms)


# bm25 weights: the words' column counts, the user_id column (in MATCH only to narrow the
# search to one user) does not. The join re-checks the owner: the index is derived data.
_SQLITE_KEYWORD_SQL = """
SELECT m.id FROM messages_fts JOIN messages AS m ON m.rowid = messages_fts.rowid
WHERE messages_fts MATCH :match AND m.user_id = :user_id {exclude}
ORDER BY bm25(messages_fts, 1.0, 0.0), m.created_at DESC, m.id
LIMIT :limit
"""
# content_tsv: to_tsvector('english', content), stored and GIN-indexed (migration 0003).
_PG_KEYWORD_SQL = """
SELECT m.id FROM messages AS m, websearch_to_tsquery('english', :match) AS q
WHERE m.user_id = :user_id AND m.content_tsv @@ q {exclude}
ORDER BY ts_rank(m.content_tsv, q) DESC, m.created_at DESC, m.id
LIMIT :limit
"""


def keyword_search(
    *,
    session: Session,
    user_id: str,
    query: str,
    limit: int,
    exclude_session_id: str | None = None,
) -> list[str]:
    """Message ids of the user best matching the query's words, best first."""
    terms = keyword_terms(query)
    if not terms or limit <= 0:
        return []
    dialect = session.get_bind().dialect.name
    params: dict[str, object] = {"user_id": user_id, "limit": limit}
    exclude = ""
    if exclude_session_id:
        exclude = "AND m.session_id != :exclude"
        params["exclude"] = exclude_session_id
    if dialect == "sqlite":
        sql, params["match"] = _SQLITE_KEYWORD_SQL, fts5_match(terms, user_id=user_id)
    elif dialect == "postgresql":
        sql, params["match"] = _PG_KEYWORD_SQL, websearch_text(terms)
    else:
        log.warning("no keyword index for %s; history search uses vectors only", dialect)
        return []
    rows = session.execute(text(sql.format(exclude=exclude)), params).all()
    return [str(r[0]) for r in rows]


def vector_search(
    *,
    runtime: Runtime,
    user: User,
    query: str,
    limit: int,
    query_vector: Vector | None = None,
) -> list[str]:
    """Message ids nearest in meaning, best first; [] when the vector store cannot be
    reached from this process (embedded Qdrant owned by a separate worker): keyword
    results alone are still worth returning."""
    try:
        messages = runtime.messages_of(tenant_id=user.tenant_id, user_id=user.id)
        vector = query_vector if query_vector is not None else runtime.embedder.embed([query])[0]
        hits = messages.search(vector, limit=limit)
    except Unavailable as exc:
        log.warning("history search without vectors: %s", exc.message, extra={"user_id": user.id})
        return []
    return [h.id for h in hits]


@dataclass(frozen=True, slots=True)
class Fused:
    message_id: str
    score: float
    keyword_rank: int | None
    vector_rank: int | None


def reciprocal_rank_fusion(
    keyword: Sequence[str], vector: Sequence[str], *, rrf_k: int
) -> list[Fused]:
    """score = Σ 1 / (rrf_k + rank) over the lists holding the id (ranks from 1).

    Ties break toward the better keyword rank (keyword search is the stronger single
    signal on chat histories), then the better vector rank, then the id: deterministic.
    """
    kw = {mid: rank for rank, mid in enumerate(dict.fromkeys(keyword), start=1)}
    vec = {mid: rank for rank, mid in enumerate(dict.fromkeys(vector), start=1)}
    fused = [
        Fused(
            message_id=mid,
            score=sum(1.0 / (rrf_k + r) for r in (kw.get(mid), vec.get(mid)) if r is not None),
            keyword_rank=kw.get(mid),
            vector_rank=vec.get(mid),
        )
        for mid in dict.fromkeys([*kw, *vec])
    ]
    missing = 1 << 30  # sorts after any real rank
    fused.sort(
        key=lambda f: (-f.score, f.keyword_rank or missing, f.vector_rank or missing, f.message_id)
    )
    return fused


# Built once (a context build runs it on every message); "ids" expands to the candidates.
_HIT_ROWS: Select[*tuple[Any, ...]] = (
    sa_select(
        col(Message.id),
        col(Message.session_id),
        col(Message.external_id),
        col(Message.role),
        col(Message.speaker),
        col(Message.content),
        col(Message.created_at),
        col(ChatSession.external_id).label("session_external_id"),
    )
    .join(ChatSession, col(ChatSession.id) == col(Message.session_id))
    .where(
        col(Message.id).in_(bindparam("ids", expanding=True)),
        col(Message.user_id) == bindparam("user_id"),
    )
)


def search_history(
    *,
    runtime: Runtime,
    session: Session,
    user: User,
    query: str,
    k: int = 10,
    query_vector: Vector | None = None,
    exclude_session_id: str | None = None,
) -> list[MessageHit]:
    """The user's k earlier messages most relevant to the query, from any session.

    `exclude_session_id` is an internal session id (the current session, whose history the
    caller shows anyway); `query_vector` saves embedding the query a second time when the
    caller already did. Rows are read from SQL, so a message deleted a moment ago is never
    returned even if its vector lingers.
    """
    if k <= 0 or not query.strip():
        return []
    depth = k * CANDIDATES_PER_RESULT
    keyword = keyword_search(
        session=session,
        user_id=user.id,
        query=query,
        limit=depth,
        exclude_session_id=exclude_session_id,
    )
    # Over-fetch when excluding: the current session's messages are dropped below, and the
    # point payload is not consulted for that (SQL is the record; filters cost ~10x embedded).
    vector = vector_search(
        runtime=runtime,
        user=user,
        query=query,
        query_vector=query_vector,
        limit=depth * 2 if exclude_session_id else depth,
    )

    candidates = list(dict.fromkeys([*keyword, *vector]))
    if not candidates:
        return []
    # Plain column tuples, not ORM objects: hydrating ~80 Message rows per search cost more
    # than the keyword query itself.
    rows = {
        r.id: r for r in session.execute(_HIT_ROWS, {"ids": candidates, "user_id": user.id}).all()
    }
    live_vector = [
        mid for mid in vector if mid in rows and rows[mid].session_id != exclude_session_id
    ][:depth]
    fused = reciprocal_rank_fusion(
        [mid for mid in keyword if mid in rows],
        live_vector,
        rrf_k=runtime.settings.context.rrf_k,
    )
    hits: list[MessageHit] = []
    for f in fused[:k]:
        row = rows[f.message_id]
        hits.append(
            MessageHit(
                message_id=row.id,
                external_id=row.external_id,
                session_id=row.session_external_id,
                role=row.role,
                speaker=row.speaker,
                content=row.content,
                created_at=row.created_at,
                score=round(f.score, 6),
                keyword_rank=f.keyword_rank,
                vector_rank=f.vector_rank,
            )
        )
    return hits
