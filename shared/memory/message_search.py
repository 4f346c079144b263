"""History search: a user's earlier messages by keyword and meaning, fused by rank.

The vector engine answers both (ADR 0013): the extraction worker writes each message into
the user's message collection (`UserHistory.messages`, point id = message id) with a dense
vector of "(8 May 2023) Ana: <content>" and a BM25 sparse vector of its words, and one
request returns the user's best 4k by meaning and by words. Messages the engine does not
hold yet (`Message.indexed_at` unset: the worker is behind) are found by SQL full-text,
whose rank joins the words' list, so a message is findable by its words from the moment
it is committed. When the engine cannot answer — the process cannot open the embedded
folder, or the collection predates sparse vectors (`tiermem reindex` remakes it) — SQL
full-text (SQLite FTS5 bm25 or PostgreSQL ts_rank, migration 0003) stands in for the
words' list, as before ADR 0013.

The lists are fused: on long chat histories keyword search wins single-hop and date
questions, vectors win paraphrases, and their top lists overlap little, so the fusion beats
either alone (measured on a public multi-session chat benchmark). The engine's answer is
fused by score (ADR 0014: BM25 over the best candidate's + a weight × cosine, plus a bonus
when the query names the speaker), SQL full-text's by reciprocal rank (its scores do not
compare with the engine's). Every hit keeps its rank and score in each list.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Select, bindparam, text, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from shared.config import ContextSettings
from shared.db.models import ChatSession, Message, User, utcnow
from shared.embeddings import CachedEmbedder, Embedder, Vectors
from shared.errors import InvalidInput, Unavailable
from shared.extraction.prefilter import is_small_talk
from shared.inputs import BLANK
from shared.memory.locks import UserLocks
from shared.memory.messages import MessageHit, MessageRef
from shared.vectors import HybridHits, Vector, VectorPoint
from shared.vectors.scope import SESSION_FIELD, UserVectors
from shared.vectors.sparse import blended_terms, query_terms

log = logging.getLogger(__name__)

# How deep each side's list goes: deep enough that a message ranked low by one side but high
# by the other is among the candidates, which are then scored by both (ADR 0014). Beyond 40
# a side, a deeper list found nothing more for 10 hits nor for the context's 40 (measured on
# a public chat benchmark), and costs the engine and SQL for every candidate.
MIN_CANDIDATES = 40


def candidate_depth(k: int) -> int:
    return max(k, MIN_CANDIDATES)


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


@dataclass(frozen=True, slots=True)
class UserHistory:
    """One user's message collection and the embedder that fills and searches it, each
    opened on first use (the caller builds it: `Runtime.history_of`). The vector store may
    be another process's (embedded Qdrant held by the worker): opening it raises
    Unavailable, and history search then answers from SQL without loading the model."""

    messages: Callable[[], UserVectors]
    embedder: Callable[[], Embedder]


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
    """Whether a message gets a dense vector: user and assistant messages, except small
    talk — "thanks!" and "ok" say nothing worth finding by meaning and, being short and
    generic, would sit close to many vague queries. Every message is found by its words
    (its sparse vector, or SQL full-text)."""
    return message.role in INDEXED_ROLES and not is_small_talk(message.content)


def _embed_uncached(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    # Each message is embedded once: kept in the LRU it would only push out the query
    # embeddings the cache is there for (the context builder embeds every query).
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    return inner.embed(texts)


@dataclass(frozen=True, slots=True)
class Around:
    """The text of the messages just before and just after each message in its session."""

    before: dict[str, str]
    after: dict[str, str]


def messages_around(session: Session, rows: Sequence[Message]) -> Around:
    """message id → the text of its neighbours in its session (one query)."""
    wanted: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for r in rows:
        wanted.setdefault((r.session_id, r.seq - 1), []).append((r.id, "before"))
        wanted.setdefault((r.session_id, r.seq + 1), []).append((r.id, "after"))
    around = Around({}, {})
    if not rows:
        return around
    found = session.exec(
        select(Message.session_id, Message.seq, Message.content).where(
            col(Message.session_id).in_({sid for sid, _ in wanted}),
            col(Message.seq).in_({seq for _, seq in wanted}),
        )
    ).all()
    for sid, seq, content in found:
        for mid, side in wanted.get((sid, seq), []):
            (around.before if side == "before" else around.after)[mid] = content
    return around


def _points(
    embedder: Embedder,
    rows: Sequence[Message],
    around: Around,
    known: Mapping[str, Vector] | None = None,
) -> list[VectorPoint]:
    """The messages as points: a dense vector when is_indexable (one embed call for those
    not `known`), a sparse one when it has any terms, of its plain content (not the dated
    text: that lost temporal and open-domain questions, ADR 0013) with the words of the
    messages around it, so that an answer is found by the words of the question it
    answers (ADR 0014); neither, no point."""
    known = known or {}
    dense = [r for r in rows if is_indexable(r) and r.id not in known]
    vectors: dict[str, Vector] = {r.id: known[r.id] for r in rows if r.id in known}
    if dense:
        embedded = _embed_uncached(embedder, [index_text(r) for r in dense])
        vectors.update({r.id: v for r, v in zip(dense, embedded, strict=True)})
    points = []
    for r in rows:
        sparse = blended_terms(r.content, around.before.get(r.id), around.after.get(r.id))
        vector = vectors.get(r.id)
        if vector is None and sparse is None:
            continue
        # session_id is the internal id: payload values are never shown to clients.
        payload = {
            SESSION_FIELD: r.session_id,
            "created_at": r.created_at.isoformat(),
            "role": r.role,
        }
        points.append(VectorPoint(id=r.id, vector=vector, payload=payload, sparse=sparse))
    return points


def _answered(session: Session, rows: Sequence[Message]) -> list[Message]:
    """The indexed messages just before `rows` that are not among them: each now has a
    message after it, whose words its sparse vector should hold (a reply indexed with its
    turn, before the next turn was said)."""
    ids = {r.id for r in rows}
    keys = {(r.session_id, r.seq - 1) for r in rows if r.seq > 0}
    if not keys:
        return []
    found = session.exec(
        select(Message).where(
            col(Message.session_id).in_({sid for sid, _ in keys}),
            col(Message.seq).in_({seq for _, seq in keys}),
            col(Message.indexed_at).is_not(None),
        )
    ).all()
    return [m for m in found if (m.session_id, m.seq) in keys and m.id not in ids]


# How far back a turn looks for messages no run covers (see turn_message_ids).
PREAMBLE_WINDOW = 16


def turn_message_ids(*, read_engine: Engine, message_id: str, reply_id: str | None) -> list[str]:
    """What a turn's run indexes: its user message and reply, and the messages between the
    previous user message and this one that no run covers (system or tool messages, an
    assistant's opening line) and that are not indexed yet. Left out, they would be found
    by SQL full-text only, and keep it asked on every search of the user."""
    with Session(read_engine) as session:
        message = session.get(Message, message_id)
        if message is None:
            return [message_id, *([reply_id] if reply_id else [])]
        earlier = session.exec(
            select(Message.id, Message.role, Message.indexed_at)
            .where(
                Message.session_id == message.session_id,
                col(Message.seq) < message.seq,
                col(Message.seq) >= message.seq - PREAMBLE_WINDOW,
            )
            .order_by(col(Message.seq).desc())
        ).all()
    preamble = []
    for mid, role, indexed_at in earlier:
        if role == "user":
            break
        if indexed_at is None:
            preamble.append(mid)
    return [*reversed(preamble), message_id, *([reply_id] if reply_id else [])]


def index_messages(
    *,
    history: UserHistory,
    engine: Engine,
    read_engine: Engine,
    locks: UserLocks,
    user_id: str,
    message_ids: Sequence[str],
) -> int:
    """Write the given messages into the user's message collection (one embed call), and
    mark them indexed in SQL, where history search stops asking full-text for them.

    Idempotent: the point id is the message id. The embedding runs before the user's lock
    is taken (it is the slow part); under the lock the rows are looked up again, so a
    message or user deleted meanwhile (delete_user holds the same lock) cannot come back
    as a point. Returns the number of points written.
    """
    wanted = [i for i in message_ids if i]
    if not wanted:
        return 0
    with Session(read_engine) as session:
        rows = session.exec(
            select(Message)
            .where(col(Message.id).in_(wanted), Message.user_id == user_id)
            .order_by(col(Message.seq))
        ).all()
        answered = _answered(session, rows)
        around = messages_around(session, [*rows, *answered])
    if not rows:
        return 0
    messages, embedder = history.messages(), history.embedder()
    # The messages before them are written again with the words after them; their dense
    # vectors are read back rather than embedded again.
    kept = {h.id: h.vector for h in messages.retrieve([m.id for m in answered], with_vectors=True)}
    made = _points(embedder, [*rows, *answered], around, {i: v for i, v in kept.items() if v})
    with locks.hold(user_id):
        with Session(read_engine) as session:
            present = set(
                session.exec(
                    select(Message.id).where(
                        col(Message.id).in_([r.id for r in [*rows, *answered]]),
                        Message.user_id == user_id,
                    )
                ).all()
            )
        points = [p for p in made if p.id in present]
        if points:
            messages.ensure(embedder.dim)  # sparse-only points cannot make it
            messages.upsert(points)
        held = _holds_words(messages)
    if held:
        # Every row handled, pointless ones too (no terms, no meaning): nothing more of
        # them is findable, and an unmarked row would keep full-text busy for the user.
        with Session(engine) as session:
            _mark_indexed(session, user_id, [r.id for r in rows if r.id in present])
            session.commit()
    return len(points)


def reindex_messages(
    *, history: UserHistory, session: Session, user: User, batch: int = 256
) -> int:
    """Rebuild the user's message collection from SQL; the caller holds the user's lock.
    Until done, SQL full-text finds the user's messages by their words."""
    messages, embedder = history.messages(), history.embedder()
    session.execute(update(Message).where(col(Message.user_id) == user.id).values(indexed_at=None))
    session.commit()
    messages.drop()
    messages.ensure(embedder.dim)
    rows = session.exec(
        select(Message)
        .where(Message.user_id == user.id)
        .order_by(col(Message.created_at), col(Message.id))
    ).all()
    written = 0
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        points = _points(embedder, chunk, messages_around(session, chunk))
        messages.upsert(points)
        written += len(points)
    if _holds_words(messages):
        _mark_indexed(session, user.id, [r.id for r in rows])
        session.commit()
    return written


def _mark_indexed(session: Session, user_id: str, ids: Sequence[str]) -> None:
    if ids:
        session.execute(
            update(Message)
            .where(col(Message.id).in_(ids), col(Message.user_id) == user_id)
            .values(indexed_at=utcnow())
        )


_REINDEX_TOLD = threading.Event()


def _holds_words(messages: UserVectors) -> bool:
    """Whether the user's message collection holds sparse vectors; when it was made before
    them, says once per process what remakes it."""
    held = messages.has_sparse()
    if held is False and not _REINDEX_TOLD.is_set():
        _REINDEX_TOLD.set()
        log.warning(
            "message collections made by an earlier tiermem hold no sparse vectors: history "
            "search answers their users from SQL full-text and dense vectors, as before. Run "
            "`tiermem reindex` once to remake them (ADR 0013)"
        )
    return bool(held)


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
# `unindexed`: a message the vector engine does not hold yet (see search_history).
_SQLITE_KEYWORD_SQL = """
SELECT m.id, m.indexed_at IS NULL AS unindexed
FROM messages_fts JOIN messages AS m ON m.rowid = messages_fts.rowid
WHERE messages_fts MATCH :match AND m.user_id = :user_id {exclude}
ORDER BY bm25(messages_fts, 1.0, 0.0), m.created_at DESC, m.id
LIMIT :limit
"""
# content_tsv: to_tsvector('english', content), stored and GIN-indexed (migration 0003).
_PG_KEYWORD_SQL = """
SELECT m.id, m.indexed_at IS NULL AS unindexed
FROM messages AS m, websearch_to_tsquery('english', :match) AS q
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
    """Message ids of the user best matching the query's words, best first (SQL full-text)."""
    rows = _keyword_rows(session, user_id, query, limit, exclude_session_id)
    return [mid for mid, _ in rows]


def _keyword_rows(
    session: Session, user_id: str, query: str, limit: int, exclude_session_id: str | None
) -> list[tuple[str, bool]]:
    """(message id, not yet in the vector engine) of keyword_search's hits."""
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
    return [(str(r[0]), bool(r[1])) for r in rows]


# Only messages the vector engine does not hold yet, through their partial index: in the
# steady state (the worker keeping up) none, and full-text is not asked at all.
_ANY_UNINDEXED_SQL = """
SELECT 1 FROM messages AS m WHERE m.user_id = :user_id AND m.indexed_at IS NULL {exclude}
LIMIT 1
"""


def unindexed_keyword_ranks(
    *,
    session: Session,
    user_id: str,
    query: str,
    limit: int,
    exclude_session_id: str | None = None,
) -> dict[str, int]:
    """The messages the engine does not hold yet among full-text's best `limit` of all the
    user's messages, with their rank there: where they would stand by their words had the
    worker indexed them."""
    if not keyword_terms(query):
        return {}
    params: dict[str, object] = {"user_id": user_id}
    exclude = ""
    if exclude_session_id:
        exclude, params["exclude"] = "AND m.session_id != :exclude", exclude_session_id
    if session.execute(text(_ANY_UNINDEXED_SQL.format(exclude=exclude)), params).first() is None:
        return {}
    rows = _keyword_rows(session, user_id, query, limit, exclude_session_id)
    return {mid: rank for rank, (mid, unindexed) in enumerate(rows, start=1) if unindexed}


def vector_search(
    *,
    history: UserHistory,
    user: User,
    query: str,
    limit: int,
    query_vector: Vector | None = None,
) -> list[str]:
    """Message ids nearest in meaning, best first; [] when the vector store cannot be
    reached from this process (embedded Qdrant owned by a separate worker): keyword
    results alone are still worth returning."""
    try:
        messages = history.messages()
        vector = query_vector if query_vector is not None else history.embedder().embed([query])[0]
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
    keyword_score: float | None = None  # BM25 over the best candidate's: 0-1
    vector_score: float | None = None  # cosine
    speaker_named: bool = False


def reciprocal_rank_fusion(
    keyword: Sequence[str], vector: Sequence[str], *, rrf_k: int
) -> list[Fused]:
    """score = Σ 1 / (rrf_k + rank) over the lists holding the id (ranks from 1).

    Ties break toward the better keyword rank (keyword search is the stronger single
    signal on chat histories), then the better vector rank, then the id: deterministic.
    """
    kw, vec = _ranks(keyword), _ranks(vector)
    fused = [
        Fused(
            message_id=mid,
            score=sum(1.0 / (rrf_k + r) for r in (kw.get(mid), vec.get(mid)) if r is not None),
            keyword_rank=kw.get(mid),
            vector_rank=vec.get(mid),
        )
        for mid in dict.fromkeys([*kw, *vec])
    ]
    return _ordered(fused)


def _ranks(ids: Sequence[str]) -> dict[str, int]:
    return {mid: rank for rank, mid in enumerate(dict.fromkeys(ids), start=1)}


def _ordered(fused: list[Fused]) -> list[Fused]:
    missing = 1 << 30  # sorts after any real rank
    fused.sort(
        key=lambda f: (-f.score, f.keyword_rank or missing, f.vector_rank or missing, f.message_id)
    )
    return fused


def fuse_scores(
    found: HybridHits, *, vector_weight: float, fresh: Mapping[str, int] | None = None
) -> list[Fused]:
    """score = BM25 / the best BM25 among the candidates + vector_weight × cosine.

    Scores, not ranks: how far the first hit stands above the tenth is the signal reciprocal
    rank fusion throws away (ADR 0014). `found` ranks the engine's best by words and by
    meaning and scores every candidate of either by both; a candidate it does not score has
    no score there (no word of the query, no dense vector: 0). `fresh`: messages the engine
    does not hold yet, by their rank in SQL full-text, given the engine's keyword score at
    that rank (its last past its end; the best, 1, when it found none) and the lowest cosine
    of the list by meaning (the worker embeds them soon)."""
    fresh = fresh or {}
    best = max([h.score for h in found.sparse[:1]], default=0.0) or 1.0
    by_rank = [h.score / best for h in found.sparse]
    kw_rank, vec_rank = _ranks([h.id for h in found.sparse]), _ranks([h.id for h in found.dense])
    fresh_vec = min((h.score for h in found.dense), default=0.0)
    fused = []
    for mid in dict.fromkeys([*kw_rank, *vec_rank, *fresh]):
        words = found.sparse_scores.get(mid)
        k_score = None if words is None else words / best
        v_score, rank = found.dense_scores.get(mid), kw_rank.get(mid)
        if mid in fresh and rank is None:  # indexed meanwhile: the engine's score stands
            rank = fresh[mid]
            k_score = by_rank[min(rank, len(by_rank)) - 1] if by_rank else 1.0
        cosine = v_score if v_score is not None else fresh_vec if mid in fresh else 0.0
        fused.append(
            Fused(
                message_id=mid,
                score=(k_score or 0.0) + vector_weight * cosine,
                keyword_rank=rank,
                vector_rank=vec_rank.get(mid),
                keyword_score=k_score,
                vector_score=v_score,
            )
        )
    return _ordered(fused)


def name_words(text: str) -> set[str]:
    """The words a name is recognised by in a query: lowercased, a possessive's 's dropped
    ("Caroline's" → "caroline"), stopwords out."""
    words = (t.lower().removesuffix("'s").removesuffix("’s") for t in _TERM.findall(text))
    return {w for w in words if w and w not in _STOPWORDS}


def with_speakers_named(
    fused: Sequence[Fused], speakers: Mapping[str, str | None], query: str, *, bonus: float
) -> list[Fused]:
    """Candidates whose speaker the query names ("What did Caroline research?") rise by
    `bonus`: the question is about what that person said, and the words of the name itself
    mostly match messages addressed to them. Candidates not in `speakers` (deleted since
    the engine answered) are dropped."""
    asked = name_words(query) if bonus else set()
    named: dict[str | None, bool] = {None: False}  # per speaker: a few in a history
    out = []
    for f in fused:
        if f.message_id not in speakers:
            continue
        speaker = speakers[f.message_id]
        if speaker not in named:
            named[speaker] = bool(asked & name_words(speaker or ""))
        if named[speaker]:
            f = replace(f, score=f.score + bonus, speaker_named=True)
        out.append(f)
    return _ordered(out) if asked else out


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
    history: UserHistory,
    context: ContextSettings,
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
    depth = candidate_depth(k)
    dense: list[str] = []  # by meaning, for the SQL path
    try:
        messages = history.messages()
        vector = query_vector if query_vector is not None else history.embedder().embed([query])[0]
        excluded = {SESSION_FIELD: exclude_session_id} if exclude_session_id else None
        found = messages.hybrid_search(vector, query_terms(query), limit=depth, exclude=excluded)
        if found is None:  # no collection yet, or one made before sparse vectors
            _holds_words(messages)
            # Over-fetch when excluding: such a collection has no session index to filter
            # on; the current session's messages are dropped once their rows are read.
            limit = depth * 2 if exclude_session_id else depth
            dense = [h.id for h in messages.search(vector, limit=limit)]
    except Unavailable as exc:  # e.g. the embedded folder is another process's
        log.warning("history search without vectors: %s", exc.message, extra={"user_id": user.id})
        found = None
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


MAX_AROUND = 5


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


def search_user_history(
    *,
    history: UserHistory,
    context: ContextSettings,
    session: Session,
    user: User,
    query: str,
    k: int = 10,
    exclude_session_external_id: str | None = None,
    around: int = 0,
) -> MessageHitsPublic:
    """What `GET /v1/users/{id}/history/search` answers: the user's best k earlier messages,
    leaving out one of their sessions by its external id, each hit with its exchange."""
    if not query.strip(BLANK):
        raise InvalidInput("q is blank; send the words or question to search for")
    excluded: str | None = None
    if exclude_session_external_id:
        # A session of another user, or none at all, has nothing here to leave out.
        excluded = session.exec(
            select(ChatSession.id).where(
                ChatSession.tenant_id == user.tenant_id,
                ChatSession.user_id == user.id,
                ChatSession.external_id == exclude_session_external_id,
            )
        ).first()
    hits = search_history(
        history=history,
        context=context,
        session=session,
        user=user,
        query=query,
        k=k,
        exclude_session_id=excluded,
    )
    hits = with_exchange(session, user, hits, around)
    return MessageHitsPublic(data=hits, count=len(hits))


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
