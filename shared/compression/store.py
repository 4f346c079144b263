"""Tier state in SQL: load it for the engine, persist one step per transaction, check it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, bindparam, delete, func, update
from sqlalchemy import select as sa_select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, col, select

from shared.compression.budget import (
    SUMMARY_LABEL,
    header_cost,
    line_cost,
    make_budget,
)
from shared.compression.spans import SeqRange, own_range, partition_problems
from shared.compression.tiers import Entry, StaleState, Step, TierState
from shared.config import CompressionSettings
from shared.db.engine import session_scope
from shared.db.models import ChatSession, CompressionState, Message, TierEntry, new_id, utcnow
from shared.errors import InvalidInput
from shared.memory.names import message_label, session_user_name

# For the cheap trigger check only: what a message's line costs beyond its text
# ("Speaker: " and the newline). The loop itself counts every line exactly.
LINE_OVERHEAD_ESTIMATE = 4


def effective_settings(base: CompressionSettings, overrides: dict[str, Any]) -> CompressionSettings:
    """The deployment's settings with a session's overrides, validated together."""
    if not overrides:
        return base
    try:
        return CompressionSettings.model_validate({**base.model_dump(), **overrides})
    except ValueError as exc:
        errors = getattr(exc, "errors", None)
        message = errors()[0]["msg"] if callable(errors) else str(exc)
        raise InvalidInput(
            f"invalid compression settings: {message}", details={"settings": overrides}
        ) from exc


def ensure_state(session: Session, chat: ChatSession) -> CompressionState:
    """The session's state row, created on first use (INSERT … ON CONFLICT DO NOTHING: two
    first runs may race)."""
    row = session.get(CompressionState, chat.id)
    if row is not None:
        return row
    values = CompressionState(session_id=chat.id, tenant_id=chat.tenant_id).model_dump()
    table = SQLModel.metadata.tables[CompressionState.__tablename__]
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(dialect.insert(table).values(**values).on_conflict_do_nothing())
    row = session.get(CompressionState, chat.id)
    assert row is not None
    return row


# The statements every context build runs are built once, with bound parameters: building
# and cache-keying a select each time cost about as much as running it on SQLite.
# The columns a message entry needs, read as plain rows: the context reads up to 500
# messages per build, and hydrating ORM objects for them was most of the tier's cost.
_MESSAGE_COLUMNS = (
    col(Message.id),
    col(Message.session_id),
    col(Message.seq),
    col(Message.role),
    col(Message.speaker),
    col(Message.content),
    col(Message.token_count),
    col(Message.created_at),
)
_TIER_ENTRIES = (
    select(TierEntry)
    .where(col(TierEntry.session_id) == bindparam("chat_id"))
    .order_by(col(TierEntry.tier), col(TierEntry.position))
)
_SESSION_MESSAGES = sa_select(*_MESSAGE_COLUMNS).where(
    col(Message.session_id) == bindparam("chat_id")
)
_HEAD_MESSAGES = _SESSION_MESSAGES.where(col(Message.seq) <= bindparam("through")).order_by(
    col(Message.seq)
)
_CURRENT_MESSAGES = _SESSION_MESSAGES.where(col(Message.seq) > bindparam("after"))
_CURRENT_ALL = _CURRENT_MESSAGES.order_by(col(Message.seq))
_CURRENT_NEWEST = _CURRENT_MESSAGES.order_by(col(Message.seq).desc()).limit(bindparam("limit"))


def message_entry(m: Message | Row[Any], name: str, *, exact: bool = True) -> Entry:
    """`exact=False` estimates the line's cost instead of counting it: for readers that
    only show the tiers (the context builder counts what it packs itself)."""
    label = message_label(m.role, m.speaker, name)
    return Entry(
        id=m.id,
        kind="message",
        role=m.role,
        speaker=m.speaker,
        label=label,
        text=m.content,
        tokens=m.token_count,
        cost=line_cost(label, m.content) if exact else m.token_count + LINE_OVERHEAD_ESTIMATE,
        level=0,
        spans=(SeqRange(m.session_id, m.seq, m.seq, m.id, m.id),),
        position=m.seq,
        span_end_at=m.created_at,
    )


def row_entry(row: TierEntry, name: str) -> Entry:
    label = SUMMARY_LABEL if row.kind == "summary" else message_label(row.role, row.speaker, name)
    return Entry(
        id=row.id,
        kind="summary" if row.kind == "summary" else "message",
        role=row.role,
        speaker=row.speaker,
        label=label,
        text=row.text,
        tokens=row.token_count,
        cost=row.cost_tokens,
        level=row.level,
        spans=tuple(SeqRange.of(s) for s in row.spans),
        position=row.position,
        message_count=row.message_count,
        span_end_at=row.span_end_at,
        summarizer=row.summarizer,
        model=row.model,
        created_by_run=row.created_by_run,
    )


def entry_row(entry: Entry, *, chat_id: str, tier: str) -> TierEntry:
    own = own_range(entry.spans, chat_id)
    return TierEntry(
        id=entry.id,
        session_id=chat_id,
        tier=tier,
        position=entry.position,
        kind=entry.kind,
        level=entry.level,
        role=entry.role,
        speaker=entry.speaker,
        text=entry.text,
        token_count=entry.tokens,
        cost_tokens=entry.cost,
        first_seq=own.first_seq if own else None,
        last_seq=own.last_seq if own else None,
        first_message_id=own.first_message_id if own else None,
        last_message_id=own.last_message_id if own else None,
        spans=[r.as_dict() for r in entry.spans],
        message_count=entry.message_count,
        span_end_at=entry.span_end_at,
        summarizer=entry.summarizer,
        model=entry.model,
        created_by_run=entry.created_by_run,
    )


@dataclass(frozen=True)
class Loaded:
    state: TierState
    version: int
    overrides: dict[str, Any]  # the session's settings; effective_settings() applies them
    seeded: tuple[SeqRange, ...]
    covered_through: int
    row: CompressionState | None


def load(
    session: Session,
    chat: ChatSession,
    *,
    current_limit: int | None = None,
    exact_costs: bool = True,
    user_name: str | None = None,
) -> Loaded:
    """The session's tiers as the engine sees them.

    The current tier is every message after the newest one an entry (or the head) covers;
    it is derived from the entries read here rather than from the state row, so a reader
    that sees a step half-way (PostgreSQL's READ COMMITTED reads each statement fresh)
    still sees every message exactly once. `user_name` is the session's user name when
    the caller has read it already.
    """
    row = session.get(CompressionState, chat.id)
    rows = session.exec(_TIER_ENTRIES, params={"chat_id": chat.id}).all()
    name = user_name if user_name is not None else session_user_name(session, chat)
    head_through = row.head_through_seq if row is not None else None
    covered = max(
        [r.last_seq for r in rows if r.last_seq is not None]
        + ([head_through] if head_through is not None else [])
        + [-1]
    )
    head: tuple[Entry, ...] = ()
    if head_through is not None:
        head = tuple(
            message_entry(m, name, exact=exact_costs)
            for m in session.execute(_HEAD_MESSAGES, {"chat_id": chat.id, "through": head_through})
        )
    if current_limit is None:
        current_rows = list(session.execute(_CURRENT_ALL, {"chat_id": chat.id, "after": covered}))
    else:  # the newest few, for a context that could never show more anyway
        current_rows = list(
            session.execute(
                _CURRENT_NEWEST, {"chat_id": chat.id, "after": covered, "limit": current_limit}
            )
        )
        current_rows.reverse()
    state = TierState(
        chat_id=chat.id,
        head=head,
        bulks=tuple(row_entry(r, name) for r in rows if r.tier == "bulks"),
        topics=tuple(row_entry(r, name) for r in rows if r.tier == "topics"),
        current=tuple(message_entry(m, name, exact=exact_costs) for m in current_rows),
        head_decided=bool(row and row.head_decided),
    )
    return Loaded(
        state=state,
        version=row.version if row is not None else 0,
        overrides=dict(row.settings) if row is not None else {},
        seeded=tuple(SeqRange.of(s) for s in (row.seeded_spans if row else [])),
        covered_through=covered,
        row=row,
    )


def estimate_tokens(
    session: Session, chat: ChatSession, cfg: CompressionSettings
) -> tuple[int, int]:
    """(history tokens, trigger) from SQL sums alone: the check run after every reply."""
    row = session.get(CompressionState, chat.id)
    summary_cost, covered = session.exec(
        select(
            func.coalesce(func.sum(TierEntry.cost_tokens), 0), func.max(TierEntry.last_seq)
        ).where(TierEntry.session_id == chat.id)
    ).one()
    head_through = row.head_through_seq if row is not None else None
    start = max(-1, covered if covered is not None else -1)
    if head_through is not None:
        start = max(start, head_through)
    tokens, count = session.exec(
        select(func.coalesce(func.sum(Message.token_count), 0), func.count()).where(
            Message.session_id == chat.id, Message.seq > start
        )
    ).one()
    head_tokens = 0
    if head_through is not None:
        head_tokens, head_count = session.exec(
            select(func.coalesce(func.sum(Message.token_count), 0), func.count()).where(
                Message.session_id == chat.id, Message.seq <= head_through
            )
        ).one()
        head_tokens += head_count * LINE_OVERHEAD_ESTIMATE
    body = int(summary_cost) + int(tokens) + int(count) * LINE_OVERHEAD_ESTIMATE + head_tokens
    budget = make_budget(cfg, head_cost=0)
    return (header_cost() + body if body else 0), budget.trigger


def persist_step(
    engine: Engine, *, chat_id: str, expected_version: int, step: Step, run_id: str | None
) -> int:
    """One step in one transaction, only if nobody else moved the state: the new version."""
    after = step.after
    head_through = max((e.spans[-1].last_seq for e in after.head), default=None)
    covered = max(
        [
            r.last_seq
            for t in ("head", "bulks", "topics")
            for e in after.entries(t)
            for r in e.spans
            if r.chat_id == chat_id
        ]
        + [-1]
    )
    with session_scope(engine) as session:
        result = session.execute(
            update(CompressionState)
            .where(
                col(CompressionState.session_id) == chat_id,
                col(CompressionState.version) == expected_version,
            )
            .values(
                version=expected_version + 1,
                head_decided=after.head_decided,
                head_through_seq=head_through,
                covered_through_seq=covered,
                last_run_id=run_id,
                updated_at=utcnow(),
            )
        )
        if getattr(result, "rowcount", 0) != 1:
            raise StaleState(
                f"the tiers changed since version {expected_version} was read; "
                "another run got there first"
            )
        if step.source in ("topics", "bulks") and step.removed:
            ids = [e.id for e in step.removed]
            session.execute(
                delete(TierEntry).where(
                    col(TierEntry.session_id) == chat_id, col(TierEntry.id).in_(ids)
                )
            )
        if step.dest in ("topics", "bulks"):
            session.add_all(entry_row(e, chat_id=chat_id, tier=step.dest) for e in step.added)
    return expected_version + 1


def check(session: Session, chat: ChatSession, loaded: Loaded) -> list[str]:
    """The partition invariant against every stored message of the session."""
    seqs: Sequence[int] = session.exec(
        select(Message.seq).where(Message.session_id == chat.id)
    ).all()
    return partition_problems(
        loaded.state.spans_in_order(),
        session_id=chat.id,
        message_seqs=list(seqs),
        seeded=loaded.seeded,
    )


def seed_child(session: Session, *, parent: ChatSession, child: ChatSession) -> tuple[int, int]:
    """Copy the parent's tiers into a new child session: (entries, tokens).

    The parent's head and bulks become the child's bulks, its topics and current messages
    the child's topics (messages stay verbatim until the child's loop summarizes them).
    Each copy keeps its spans into the parent, and the child records those ranges, so its
    partition can be checked like any other.
    """
    loaded = load(session, parent)
    state = loaded.state
    bulks = [*state.head, *state.bulks]
    topics = [*state.topics, *state.current]
    seeded: list[SeqRange] = []
    tokens = 0
    now = utcnow()
    for tier, entries in (("bulks", bulks), ("topics", topics)):
        for position, e in enumerate(entries):
            row = entry_row(e, chat_id=child.id, tier=tier)
            row.id = new_id()
            row.position = position
            row.created_at = now
            session.add(row)
            seeded.extend(e.spans)
            tokens += e.cost
    child_state = CompressionState(
        session_id=child.id,
        tenant_id=child.tenant_id,
        settings=loaded.overrides,
        head_decided=True,  # the parent's context is the background; nothing to pin
        seeded_spans=[r.as_dict() for r in seeded],
    )
    session.add(child_state)
    return len(bulks) + len(topics), tokens
