"""A user's beliefs over time: per slot, the values it held, when each began and ended, and
the fact (and so the message) that superseded or ended it: "why does the bot think I still
live in Leeds?" answered from SQL alone."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sqlmodel import Session, col, select

from shared.db.models import Fact, User
from shared.memory.beliefs import held_value, is_ending
from shared.memory.models import (
    BeliefChange,
    BeliefSlot,
    BeliefState,
    BeliefTimeline,
    BeliefValue,
    MessageRef,
)
from shared.memory.reader import message_refs

# A turn's provenance lists its user message, then the reply (and the system or tool
# messages before them): the first few hold the message a fact was first said in.
_FIRST_TURN_IDS = 4


def belief_timeline(*, session: Session, user: User) -> BeliefTimeline:
    rows = session.exec(
        select(Fact)
        .where(Fact.user_id == user.id, col(Fact.slot).is_not(None))
        .order_by(col(Fact.slot), col(Fact.first_seen_at), col(Fact.id))
    ).all()
    by_id = {f.id: f for f in rows}
    # What ended a value may sit in another slot (an ending naming only the value, ADR 0015).
    missing = {f.superseded_by for f in rows if f.superseded_by and f.superseded_by not in by_id}
    if missing:
        by_id |= {f.id: f for f in session.exec(select(Fact).where(col(Fact.id).in_(missing)))}
    said_in = _first_messages(session, user.id, list(by_id.values()))
    slots = [
        _slot(slot, list(facts), by_id, said_in)
        for slot, facts in itertools.groupby(rows, key=lambda f: f.slot or "")
    ]
    slots.sort(key=lambda s: (s.changed_at, s.slot), reverse=True)
    return BeliefTimeline(data=slots, count=len(slots))


def _slot(
    slot: str, facts: list[Fact], by_id: dict[str, Fact], said_in: dict[str, MessageRef]
) -> BeliefSlot:
    values = [_value(f, by_id, said_in) for f in facts]
    values.sort(key=lambda v: (v.began_at, v.ended_at is None))
    current = next((v.value for v in reversed(values) if v.state == "current"), None)
    changed = max(t for v in values for t in (v.began_at, v.ended_at) if t is not None)
    return BeliefSlot(
        slot=slot, type=facts[0].type, current=current, changed_at=changed, values=values
    )


def _value(fact: Fact, by_id: dict[str, Fact], said_in: dict[str, MessageRef]) -> BeliefValue:
    successor = by_id.get(fact.superseded_by or "")
    ended_by = (
        BeliefChange(
            memory_id=successor.id,
            content=successor.content,
            is_ending=is_ending(successor),
            message=said_in.get(successor.id),
        )
        if successor is not None
        else None
    )
    return BeliefValue(
        memory_id=fact.id,
        value=fact.slot_value or held_value(fact.type, fact.details) or fact.content,
        content=fact.content,
        state=_state(fact, successor),
        began_at=fact.valid_from or fact.first_seen_at,
        ended_at=fact.valid_to,
        confidence=fact.confidence,
        mention_count=fact.mention_count,
        extractor=fact.extractor,
        model=fact.model,
        quarantine_reason=fact.quarantine_reason,
        said_in=said_in.get(fact.id),
        ended_by=ended_by,
    )


def _state(fact: Fact, successor: Fact | None) -> BeliefState:
    if fact.quarantine_reason:
        return "quarantined"
    if fact.valid_to is None:
        return "ending" if is_ending(fact) else "current"
    if successor is None:
        return "retired"
    return "ended" if is_ending(successor) else "superseded"


def _first_messages(session: Session, user_id: str, facts: Sequence[Fact]) -> dict[str, MessageRef]:
    """fact id → the user's message it was first said in (else the first one that is left)."""
    heads = {f.id: list(dict.fromkeys(f.source_message_ids))[:_FIRST_TURN_IDS] for f in facts}
    wanted = {m for ids in heads.values() for m in ids}
    if not wanted:
        return {}
    refs = message_refs(session, wanted, [user_id])
    out = {}
    for fact_id, ids in heads.items():
        present = [refs[m] for m in ids if m in refs]
        if present:
            out[fact_id] = next((r for r in present if r.role == "user"), present[0])
    return out
