"""Indexing (worker side): a user's messages written into their message collection, with
a dense vector of their dated text and a sparse one of their words and their neighbours'."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from shared.db.models import Message, User, utcnow
from shared.embeddings import CachedEmbedder, Embedder, Vectors
from shared.extraction.prefilter import is_small_talk
from shared.memory.history.collection import holds_words
from shared.memory.locks import UserLocks
from shared.vectors import Vector, VectorPoint
from shared.vectors.scope import SESSION_FIELD, UserVectors
from shared.vectors.sparse import blended_terms

INDEXED_ROLES = ("user", "assistant")
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
    messages: UserVectors,
    embedder: Embedder,
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
        words_kept = holds_words(messages)
    if words_kept:
        # Every row handled, pointless ones too (no terms, no meaning): nothing more of
        # them is findable, and an unmarked row would keep full-text busy for the user.
        with Session(engine) as session:
            _mark_indexed(session, user_id, [r.id for r in rows if r.id in present])
            session.commit()
    return len(points)


def reindex_messages(
    *,
    messages: UserVectors,
    embedder: Embedder,
    session: Session,
    user: User,
    batch: int = 256,
) -> int:
    """Rebuild the user's message collection from SQL; the caller holds the user's lock.
    Until done, SQL full-text finds the user's messages by their words."""
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
    if holds_words(messages):
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
