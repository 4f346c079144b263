"""Context assembly: the user's facts ranked (similarity, recency, mentions; the older of two
contradicting facts left out) and everything packed greedily into the token budget."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
from prometheus_client import Counter
from sqlalchemy import bindparam
from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from shared import metrics
from shared.compression.models import HistoryEntry
from shared.config import ContextSettings
from shared.context import templates as t
from shared.context.models import (
    ChatMessage,
    ContextMemory,
    ContextPublic,
)
from shared.db.models import Fact, User, utcnow
from shared.extraction.schemas import FACT_TYPES
from shared.memory.beliefs import contradicts
from shared.memory.models import MessageHit
from shared.memory.names import message_label
from shared.tokens import joined_tokens, line_tokens
from shared.vectors.scope import UserVectors

CONTRADICTIONS_DROPPED = Counter(
    "tiermem_context_contradictions_dropped",
    "memories kept out of a context because a newer memory contradicts them",
    ["type"],
    registry=metrics.REGISTRY,
)
for _type in FACT_TYPES:  # every series from the start: a rate over a missing series is empty
    CONTRADICTIONS_DROPPED.labels(type=_type)


class FactView(NamedTuple):
    """The columns ranking and the prompt read: plain rows, not ORM objects (up to 90 per
    message, and ORM loading was a sixth of a context build; bench/results/context.md)."""

    id: str
    type: str
    content: str
    last_seen_at: dt.datetime
    mention_count: int
    quarantine_reason: str | None
    # what shared.memory.beliefs reads to tell two facts that cannot both be true now
    slot: str | None
    slot_value: str | None
    details: dict[str, Any]
    first_seen_at: dt.datetime


_FACT_VIEW = sa_select(
    col(Fact.id),
    col(Fact.type),
    col(Fact.content),
    col(Fact.last_seen_at),
    col(Fact.mention_count),
    col(Fact.quarantine_reason),
    col(Fact.slot),
    col(Fact.slot_value),
    col(Fact.details),
    col(Fact.first_seen_at),
).where(col(Fact.valid_to).is_(None))


_FACTS_BY_ID = _FACT_VIEW.where(col(Fact.id).in_(bindparam("ids", expanding=True)))


def rank_memories(
    facts: UserVectors,
    session: Session,
    user: User,
    vector: np.ndarray | None,
    cfg: ContextSettings,
) -> tuple[list[tuple[FactView, float]], int, int]:
    """Similarity blended with recency and mention count; superseded facts never appear
    (only active facts are in Qdrant, and rows are re-checked in SQL), nor does a fact a
    newer candidate contradicts. Returns the best, the quarantined count and the count of
    contradicted facts that would have been among the best."""
    now = utcnow()
    if vector is not None:
        found = facts.search(
            vector, limit=cfg.max_memories * 3, score_threshold=cfg.min_memory_score
        )
        similarity = {h.id: h.score for h in found}
        rows = (
            [FactView(*r) for r in session.execute(_FACTS_BY_ID, {"ids": list(similarity)})]
            if similarity
            else []
        )
    else:  # no query yet: the most mentioned, most recent facts
        query = (
            _FACT_VIEW.where(col(Fact.user_id) == user.id)
            .order_by(col(Fact.mention_count).desc(), col(Fact.last_seen_at).desc())
            .limit(cfg.max_memories * 3)
        )
        rows = [FactView(*r) for r in session.execute(query)]
        similarity = {r.id: 1.0 for r in rows}
    scored: list[tuple[FactView, float]] = []
    quarantined = 0
    for row in rows:
        if row.quarantine_reason:
            quarantined += 1
            continue
        age_days = max(0.0, (now - row.last_seen_at).total_seconds() / 86400)
        recency = 0.5 ** (age_days / cfg.recency_half_life_days)
        mentions = min(1.0, math.log1p(row.mention_count) / math.log1p(10))
        score = (
            cfg.weight_similarity * similarity[row.id]
            + cfg.weight_recency * recency
            + cfg.weight_mentions * mentions
        )
        scored.append((row, round(score, 6)))
    scored.sort(key=lambda pair: (-pair[1], pair[0].id))
    stale = _contradicted(row for row, _ in scored)
    # counted only where it was kept out: a stale fact below the cut was not shown anyway
    dropped = [row for row, _ in scored[: cfg.max_memories] if row.id in stale]
    for row in dropped:
        CONTRADICTIONS_DROPPED.labels(type=row.type).inc()
    best = [pair for pair in scored if pair[0].id not in stale]
    return best[: cfg.max_memories], quarantined, len(dropped)


def _contradicted(rows: Iterable[FactView]) -> set[str]:
    """The ids of the facts a newer fact among `rows` contradicts (beliefs.contradicts):
    newest first, a fact is kept unless it contradicts one kept already. Newer is by
    first_seen_at, then last_seen_at, then id, so the result is the same on every call."""
    newest_first = sorted(rows, key=lambda r: (r.first_seen_at, r.last_seen_at, r.id), reverse=True)
    kept: dict[str, list[FactView]] = {}  # by type: facts of two types never contradict
    stale: set[str] = set()
    for row in newest_first:
        same_type = kept.setdefault(row.type, [])
        if any(contradicts(row, newer) for newer in same_type):
            stale.add(row.id)
        else:
            same_type.append(row)
    return stale


class _Budget:
    """Greedy packing by token count. Lines are joined with newlines, and a line with its
    newline usually costs the same alone as inside the prompt (shared.tokens.joined_tokens),
    so the sum of line costs is the prompt's cost, which is counted exactly at the end."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    def take(self, text: str, limit: int | None = None) -> bool:
        cost = line_tokens(text)
        cap = self.total if limit is None else min(self.total, limit)
        if self.used + cost > cap:
            return False
        self.used += cost
        return True


def _history_need(history: list[HistoryEntry], name: str, share: int) -> int:
    """The tokens the session's newest history takes, up to its share."""
    need = line_tokens(t.HISTORY_HEADER) if history else 0
    for entry in reversed(history):
        if need >= share:
            break
        need += line_tokens(
            t.HISTORY_LINE.format(
                speaker=message_label(entry.role, entry.speaker, name), content=entry.content
            )
        )
    return min(need, share)


def assemble(
    *,
    user: str,
    session_external_id: str,
    query: str,
    budget: int,
    name: str,
    memories: list[tuple[FactView, float]],
    hits: list[MessageHit],
    history: list[HistoryEntry],
    cfg: ContextSettings,
    quarantined: int,
    contradictions_dropped: int,
) -> ContextPublic:
    packer = _Budget(budget)
    head: list[str] = []
    preamble = t.PREAMBLE.format(user=name)
    if (memories or hits) and packer.take(preamble):
        head.append(preamble)

    # memories: take in rank order within their share, then show grouped by type
    share_end = packer.used + int(budget * cfg.memories_share)
    header = t.MEMORIES_HEADER.format(user=name)
    kept: list[tuple[FactView, float]] = []
    if memories and packer.take(header, share_end):
        for row, score in memories:
            line = t.MEMORY_LINE.format(date=t.day(row.last_seen_at), content=row.content)
            # a type header is paid for with the first memory of that type
            new_type = all(k.type != row.type for k, _ in kept)
            title = t.TYPE_HEADER.format(title=t.TYPE_TITLES.get(row.type, row.type))
            if new_type and not packer.take(title, share_end):
                continue
            if packer.take(line, share_end):
                kept.append((row, score))
            elif new_type:
                packer.used -= line_tokens(title)
        if not kept:
            packer.used -= line_tokens(header)
    grouped: dict[str, list[ContextMemory]] = {}
    for type_ in t.TYPE_ORDER:
        rows = sorted(
            (p for p in kept if p[0].type == type_),
            key=lambda p: (p[0].last_seen_at, p[0].id),
            reverse=True,
        )
        if rows:
            grouped[type_] = [
                ContextMemory(
                    id=r.id, type=r.type, content=r.content, date=r.last_seen_at.date(), score=s
                )
                for r, s in rows
            ]
    memory_lines: list[str] = []
    if grouped:
        memory_lines.append(header)
        for type_, items in grouped.items():
            memory_lines.append(t.TYPE_HEADER.format(title=t.TYPE_TITLES.get(type_, type_)))
            memory_lines.extend(
                t.MEMORY_LINE.format(date=t.day(m.date), content=m.content) for m in items
            )
    memory_tokens = packer.used

    # earlier messages: their share, plus what the memories left, plus what this session's
    # own history does not need of its share (in a new session, all of it: more earlier
    # messages are then all the budget can buy)
    history_share = int(budget * cfg.history_share)
    share_end = (
        packer.used
        + int(budget * cfg.earlier_messages_share)
        + max(0, int(budget * cfg.memories_share) - memory_tokens)
        + history_share
        - _history_need(history, name, history_share)
    )
    earlier: list[MessageHit] = []
    earlier_lines: list[str] = []
    if hits and packer.take(t.EARLIER_HEADER, share_end):
        for hit in hits:
            line = t.EARLIER_LINE.format(
                date=t.day(hit.created_at),
                session=hit.session_id,
                speaker=message_label(hit.role, hit.speaker, name),
                content=hit.content,
            )
            if packer.take(line, share_end):
                earlier.append(hit)
                earlier_lines.append(line)
        if earlier:
            earlier_lines.insert(0, t.EARLIER_HEADER)
        else:
            packer.used -= line_tokens(t.EARLIER_HEADER)
    earlier_tokens = packer.used - memory_tokens

    # history: everything that is left, newest messages first, shown in order
    kept_history: list[HistoryEntry] = []
    history_lines: list[str] = []
    if history and packer.take(t.HISTORY_HEADER):
        for entry in reversed(history):
            line = t.HISTORY_LINE.format(
                speaker=message_label(entry.role, entry.speaker, name), content=entry.content
            )
            if not packer.take(line):
                break  # older messages would leave a gap: stop at the first that does not fit
            kept_history.append(entry)
            history_lines.append(line)
        kept_history.reverse()
        history_lines.reverse()
        if kept_history:
            history_lines.insert(0, t.HISTORY_HEADER)
        else:
            packer.used -= line_tokens(t.HISTORY_HEADER)

    system_head = "\n".join(head + memory_lines + earlier_lines)
    lines = head + memory_lines + earlier_lines + history_lines
    tokens = joined_tokens(lines)
    # The packed line costs bound the prompt's (the last line saves its newline); this guard
    # keeps the promise (never over budget) should they not: drop the oldest history first.
    while tokens > budget and kept_history:
        kept_history.pop(0)
        history_lines = (history_lines[:1] + history_lines[2:]) if len(kept_history) else []
        lines = head + memory_lines + earlier_lines + history_lines
        tokens = joined_tokens(lines)
    prompt = "\n".join(lines)
    if tokens > budget:
        prompt, system_head, tokens, grouped, earlier = "", "", 0, {}, []

    messages = [ChatMessage(role="system", content=system_head)] if system_head else []
    messages.extend(
        ChatMessage(role=e.role if e.role in ("user", "assistant") else "system", content=e.content)
        for e in kept_history
    )
    return ContextPublic(
        user_id=user,
        session_id=session_external_id,
        query=query,
        budget_tokens=budget,
        token_count=tokens,
        section_tokens={
            "memories": memory_tokens,
            "earlier_messages": earlier_tokens,
            "history": max(0, tokens - memory_tokens - earlier_tokens),
        },
        memories=grouped,
        earlier_messages=earlier,
        history=kept_history,
        quarantined=quarantined,
        contradictions_dropped=contradictions_dropped,
        system_prompt=prompt,
        messages=messages,
    )
