"""Dedup, merge, supersede and end facts in a user's memory, without an LLM call.

For each new fact, in order: the same normalized content → merge; the same slot
(type/attribute) → merge when the value agrees, supersede when it differs;
cosine ≥ threshold within the same type → merge; otherwise add. A fact that states a
value ended ("Lena quit Siemens") retires the active facts holding that value (and what
was said with them of the same job: the title at that employer), by the rules in
shared.memory.beliefs; a new fact that says the value again retires the ending. Callers
hold the user's lock, so the read-decide-write below is not raced by another worker.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlmodel import Session, col, select

from shared.db.models import ExtractionRun, Fact, User, utcnow
from shared.extraction.schemas import ENDED, TypedFact
from shared.memory.beliefs import any_attribute, ends, is_ending, reopens
from shared.memory.guard import screen
from shared.memory.normalize import content_hash, may_be_paraphrases, normalize
from shared.records.events import (
    MEMORY_ADDED,
    MEMORY_ENDED,
    MEMORY_SUPERSEDED,
    MEMORY_UPDATED,
    fact_object,
    record_event,
)
from shared.vectors import VectorHit, VectorPoint, point_id
from shared.vectors.scope import UserVectors

log = logging.getLogger(__name__)


@dataclass
class WriteOutcome:
    added: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)  # ids of the facts retired
    unchanged: list[str] = field(default_factory=list)  # already recorded from this message
    # What the vector store must get once SQL committed: fact id → its vector.
    vectors: dict[str, np.ndarray] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Provenance:
    tenant_id: str
    user_id: str
    chat_id: str  # the session's internal id
    message_ids: tuple[str, ...]
    seen_at: dt.datetime  # when the source message was said
    extractor: str
    extractor_version: str
    model: str | None


def fact_id(*, user_id: str, message_id: str, fact: TypedFact) -> str:
    """Deterministic: a retried run re-derives the same id, so it cannot add a duplicate."""
    return point_id(user_id, message_id, fact.type, content_hash(fact.content))


def point_payload(row: Fact) -> dict[str, Any]:
    # Only what a search filter or a rebuild needs; the SQL row stays the source of truth.
    return {
        "type": row.type,
        "content": row.content,
        "slot": row.slot,
        "created_at": row.created_at.isoformat(),
    }


def write_facts(
    *,
    session: Session,
    facts_vectors: UserVectors,
    facts: Sequence[TypedFact],
    embeddings: np.ndarray,
    provenance: Provenance,
    dedup_threshold: float,
) -> WriteOutcome:
    """Apply the facts to SQL (committed here), then mirror the change into the vector store."""
    outcome = apply_facts(
        session=session,
        facts_vectors=facts_vectors,
        facts=facts,
        embeddings=embeddings,
        provenance=provenance,
        dedup_threshold=dedup_threshold,
    )
    record_fact_events(session, outcome=outcome, provenance=provenance)
    session.commit()
    mirror_to_vectors(
        session=session,
        facts_vectors=facts_vectors,
        user_id=provenance.user_id,
        outcomes=[outcome],
    )
    return outcome


def apply_facts(
    *,
    session: Session,
    facts_vectors: UserVectors,
    facts: Sequence[TypedFact],
    embeddings: np.ndarray,
    provenance: Provenance,
    dedup_threshold: float,
) -> WriteOutcome:
    """The SQL half of write_facts: flushed, not committed. A replay's rebuild applies many
    turns in one transaction this way; a dry run applies them and rolls back."""
    # Near neighbours are looked up before the SQL transaction opens: with SQLite that
    # transaction holds the database-wide write lock, which vector searches must not
    # prolong. The per-user lock the caller holds keeps the collection unchanged meanwhile.
    neighbours = [
        facts_vectors.search(vector, limit=5, score_threshold=dedup_threshold)
        for vector in embeddings
    ]
    # The database's own per-user serialization (PostgreSQL; SQLite's BEGIN IMMEDIATE
    # already is one): should the user's lock expire mid-write, a second writer waits here
    # instead of deciding from a stale read (a lost merge, or a fact superseding its twin).
    # FOR NO KEY UPDATE: it excludes another writer of this user, but not the KEY SHARE
    # lock an INSERT referencing the user takes, so the API's turn writer, which stores
    # every user's turns, never waits behind a memory write.
    session.exec(
        select(User.id).where(User.id == provenance.user_id).with_for_update(key_share=True)
    )
    outcome = WriteOutcome()
    to_upsert = outcome.vectors
    # Facts added earlier in this same batch: not yet in the vector store.
    batch: list[tuple[Fact, np.ndarray]] = []

    for fact, vector, hits in zip(facts, embeddings, neighbours, strict=True):
        target = _find_duplicate(session, fact, vector, hits, batch, provenance, dedup_threshold)
        if target is not None:
            if _merge(target, fact, provenance):
                outcome.merged.append(target.id)
            else:
                outcome.unchanged.append(target.id)
            outcome.superseded += _retire_named(session, fact, by=target, provenance=provenance)
            if target.id == fact_id(
                user_id=provenance.user_id, message_id=provenance.message_ids[0], fact=fact
            ):
                to_upsert[target.id] = vector  # ours: make sure the vector store has it
            session.add(target)
            continue

        new = _new_row(fact, provenance)
        existing = session.get(Fact, new.id)
        if existing is not None:
            # A rerun of this message: its fact was recorded (and, not being found active
            # above, has since been superseded). It must not retire today's fact in turn.
            outcome.unchanged.append(existing.id)
            to_upsert[existing.id] = vector
            continue
        new.quarantine_reason = screen(new.content, source="fact")
        if new.quarantine_reason is not None:
            new.slot = None  # parked: a flagged fact neither retires nor is retired by a clean one
        # a flagged ending ends nothing: it is stored as any flagged fact is
        ending = fact.ended and new.quarantine_reason is None
        rival = None if ending else _active_in_slot(session, provenance.user_id, new.slot)
        if rival is not None and rival.id != new.id and rival.first_seen_at > provenance.seen_at:
            # An older statement processed late (an imported transcript, a replay): it is
            # history, recorded as already replaced by the newer value, which stays.
            new.valid_to = rival.first_seen_at
            new.superseded_by = rival.id
            session.add(new)
            session.flush()
            outcome.added.append(new.id)
            continue
        if ending:
            outcome.superseded += _apply_ending(session, new, provenance)
        else:
            retired = [rival] if rival is not None and rival.id != new.id else []
            # an ending in the slot is the rival already: each retired once
            retired += [
                e for e in _endings_reopened_by(session, new, provenance) if e not in retired
            ]
            for old in retired:
                _retire(session, old, by=new, at=provenance.seen_at)
            outcome.superseded += [old.id for old in retired]
        if new.quarantine_reason is None:
            outcome.superseded += _retire_named(session, fact, by=new, provenance=provenance)
        session.add(new)
        session.flush()
        batch.append((new, vector))
        to_upsert[new.id] = vector
        outcome.added.append(new.id)

    session.flush()
    return outcome


def record_fact_events(session: Session, *, outcome: WriteOutcome, provenance: Provenance) -> None:
    """The memory.* events of what apply_facts changed, in its transaction (ADR 0027): added,
    updated (merged), and each retired fact as ended (by an ending the user said) or
    superseded (by a new value)."""
    changes = [(MEMORY_ADDED, i) for i in outcome.added]
    changes += [(MEMORY_UPDATED, i) for i in outcome.merged]
    for retired_id in dict.fromkeys(outcome.superseded):
        row = session.get(Fact, retired_id)
        by = session.get(Fact, row.superseded_by) if row and row.superseded_by else None
        changes.append(
            (MEMORY_ENDED if by is not None and is_ending(by) else MEMORY_SUPERSEDED, retired_id)
        )
    for type_, fact_id_ in changes:
        row = session.get(Fact, fact_id_)
        if row is None:
            continue
        ended_by = row.superseded_by if type_ == MEMORY_ENDED else None
        record_event(
            session,
            tenant_id=provenance.tenant_id,
            user_id=provenance.user_id,
            type_=type_,
            data={"memory": fact_object(row, ended_by=ended_by)},
        )


def mirror_to_vectors(
    *,
    session: Session,
    facts_vectors: UserVectors,
    user_id: str,
    outcomes: Sequence[WriteOutcome],
    retired: Sequence[str] = (),
) -> None:
    """After the commit: new and merged facts in, retired ones out — in that order, so no
    search meanwhile misses a fact that stays. A crash here is repaired by the run's retry
    (same ids) or by `tiermem reindex`; SQL never points at a fact the user cannot get back."""
    to_upsert = {k: v for o in outcomes for k, v in o.vectors.items()}
    if to_upsert:
        rows = session.exec(select(Fact).where(col(Fact.id).in_(list(to_upsert)))).all()
        facts_vectors.upsert(
            [
                VectorPoint(id=r.id, vector=to_upsert[r.id], payload=point_payload(r))
                for r in rows
                if r.valid_to is None
            ],
        )
    kept = [i for o in outcomes for i in (*o.added, *o.unchanged)]
    gone = list(dict.fromkeys([
        *retired,
        *_retired_by(session, user_id, kept),
        *(i for o in outcomes for i in o.superseded),
    ]))  # fmt: skip
    if gone:
        facts_vectors.delete(gone)


def _find_duplicate(
    session: Session,
    fact: TypedFact,
    vector: np.ndarray,
    hits: Sequence[VectorHit],
    batch: list[tuple[Fact, np.ndarray]],
    provenance: Provenance,
    threshold: float,
) -> Fact | None:
    digest = content_hash(fact.content)
    exact = session.exec(
        select(Fact).where(
            Fact.user_id == provenance.user_id,
            Fact.content_hash == digest,
            col(Fact.valid_to).is_(None),
        )
    ).first()
    if exact is not None:
        return exact
    if fact.slot and not fact.ended:  # a second ending of a slot is its own statement
        rival = _active_in_slot(session, provenance.user_id, fact.slot)
        if rival is not None:
            same = normalize(rival.slot_value or "") == normalize(fact.slot_state())
            return rival if same else None  # a different value supersedes (caller)
    best: tuple[float, Fact | None] = (threshold, None)
    for row, other in batch:
        score = float(np.dot(vector, other))
        if (
            row.type == fact.type
            and is_ending(row) == fact.ended
            and score >= best[0]
            and row.quarantine_reason is None
            and may_be_paraphrases(row.content, fact.content)
        ):
            best = (score, row)
    if best[1] is not None:
        return best[1]
    for hit in hits:
        if hit.payload.get("type") != fact.type:
            continue
        stored = session.get(Fact, hit.id)
        # a clean restatement must not vanish into a quarantined look-alike
        if stored is None or stored.valid_to is not None or stored.quarantine_reason:
            continue
        if is_ending(stored) != fact.ended or not may_be_paraphrases(stored.content, fact.content):
            continue  # "Lena quit Siemens" never merges into "Lena works at Siemens"
        # a slotted fact never merges into a different slot: that would hide a contradiction
        if not fact.slot or stored.slot == fact.slot:
            return stored
    return None


# Said of one job in one breath ("I work at Tesco as a shift manager"): when an ending
# retires one, the others said in the same message go with it ("I left Tesco").
_COMPANIONS = {
    "employer": ("occupation", "job", "workplace"),
    "school": ("occupation", "field_of_study"),
    "occupation": ("employer", "workplace"),
    "job": ("employer", "workplace"),
}


def _apply_ending(session: Session, ending: Fact, provenance: Provenance) -> list[str]:
    """Retire the active facts `ending` ends; returns their ids. The ending takes their slot
    (the slot's state is now "ended", until a new value comes); when it matches no active
    value while its slot holds another ("quit Siemens" after "works at SAP"), it is history
    only and holds no slot, so it cannot retire that other value."""
    types = ("identity", "fact", "relationship") if any_attribute(ending) else (ending.type,)
    active_before = [
        f
        for f in _active_of_type(session, provenance.user_id, *types)
        if _said_before(f, provenance)
    ]
    targets = [f for f in active_before if ends(ending, f)]
    targets += [
        f for f in active_before if f not in targets and any(_companions(t, f) for t in targets)
    ]
    when = provenance.seen_at
    if ending.valid_from is not None and ending.valid_from < when:
        when = ending.valid_from  # "Rex died in March", said in April
    for target in targets:
        _retire(session, target, by=ending, at=when)
    slots = {t.slot for t in targets if ends(ending, t)}
    if len(slots) == 1:
        ending.slot = slots.pop()  # "broke up with Tom" closes the slot "boyfriend:tom"
    if _active_in_slot(session, provenance.user_id, ending.slot) is not None:
        ending.slot = None
    return [t.id for t in targets]


def _retire_named(
    session: Session, fact: TypedFact, *, by: Fact, provenance: Provenance
) -> list[str]:
    """Retire the stored facts the ending `fact` names (shared.extraction.endings: known
    facts shown beside the turn), each when it is this user's, still active and said
    before; returns their ids. What the slot rules above retired is not retired twice."""
    when = provenance.seen_at
    if fact.valid_from is not None:
        # "handed my notice in on Friday", said on Monday
        when = min(when, dt.datetime.combine(fact.valid_from, dt.time(), tzinfo=dt.UTC))
    retired = []
    for target in filter(None, (session.get(Fact, id_) for id_ in fact.ends_fact_ids)):
        if (
            target.id == by.id
            or target.user_id != provenance.user_id
            or target.valid_to is not None
            or not _said_before(target, provenance)
        ):
            continue
        _retire(session, target, by=by, at=when)
        retired.append(target.id)
    return retired


def _said_before(fact: Fact, provenance: Provenance) -> bool:
    """Whether the ending being written can end `fact`: not when the fact was last said
    after it (an old transcript imported late) or in the same message ("works at Siemens
    Healthineers, quit Siemens" ends nothing of its own)."""
    return fact.last_seen_at <= provenance.seen_at and provenance.message_ids[0] not in (
        fact.source_message_ids
    )


def _companions(retired: Fact, other: Fact) -> bool:
    if not retired.source_message_ids or not other.source_message_ids:
        return False
    said_together = retired.source_message_ids[0] == other.source_message_ids[0]
    attribute = str(retired.details.get("attribute") or "")
    return (
        said_together
        and other.type == retired.type
        and str(other.details.get("attribute") or "") in _COMPANIONS.get(attribute, ())
    )


def _endings_reopened_by(session: Session, new: Fact, provenance: Provenance) -> list[Fact]:
    """Active endings that `new` says again: "back into F1" after "stopped watching F1"."""
    if not new.slot:
        return []
    return [
        f
        for f in _active_of_type(session, provenance.user_id, new.type, endings_only=True)
        if f.first_seen_at <= provenance.seen_at and reopens(new, f)
    ]


def _retire(session: Session, fact: Fact, *, by: Fact, at: dt.datetime) -> None:
    fact.valid_to = at
    fact.superseded_by = by.id
    fact.updated_at = utcnow()
    session.add(fact)


def _active_of_type(
    session: Session, user_id: str, *types: str, endings_only: bool = False
) -> list[Fact]:
    """The user's active, unquarantined facts of these types that hold a slot (only the
    endings among them: the check every new fact makes stays small)."""
    query = select(Fact).where(
        Fact.user_id == user_id,
        col(Fact.type).in_(types),
        col(Fact.slot).is_not(None),
        col(Fact.valid_to).is_(None),
        col(Fact.quarantine_reason).is_(None),
    )
    if endings_only:
        query = query.where(Fact.slot_value == ENDED)
    return list(session.exec(query).all())


def _active_in_slot(session: Session, user_id: str, slot: str | None) -> Fact | None:
    if not slot:
        return None
    return session.exec(
        select(Fact).where(Fact.user_id == user_id, Fact.slot == slot, col(Fact.valid_to).is_(None))
    ).first()


def _retired_by(session: Session, user_id: str, ids: list[str]) -> list[str]:
    if not ids:
        return []
    rows = session.exec(
        select(Fact.id).where(Fact.user_id == user_id, col(Fact.superseded_by).in_(ids))
    ).all()
    return list(rows)


def _merge(target: Fact, fact: TypedFact, provenance: Provenance) -> bool:
    """Union the provenance. Returns False when this message was already counted (a rerun)."""
    if provenance.message_ids[0] in target.source_message_ids:
        return False
    target.source_message_ids = [*target.source_message_ids, *provenance.message_ids]
    if provenance.chat_id not in target.source_session_ids:
        target.source_session_ids = [*target.source_session_ids, provenance.chat_id]
    target.mention_count += 1
    target.last_seen_at = max(target.last_seen_at, provenance.seen_at)
    target.confidence = max(target.confidence, fact.confidence)
    target.tags = sorted(set(target.tags) | set(fact.tags))
    target.updated_at = utcnow()
    return True


def _new_row(fact: TypedFact, provenance: Provenance) -> Fact:
    valid_from = (
        dt.datetime.combine(fact.valid_from, dt.time(), tzinfo=dt.UTC)
        if fact.valid_from
        else provenance.seen_at
    )
    return Fact(
        id=fact_id(user_id=provenance.user_id, message_id=provenance.message_ids[0], fact=fact),
        tenant_id=provenance.tenant_id,
        user_id=provenance.user_id,
        type=fact.type,
        content=fact.content,
        content_hash=content_hash(fact.content),
        subject=fact.subject,
        slot=fact.slot,
        slot_value=fact.slot_state() or None,
        details=fact.details,
        tags=list(fact.tags),
        confidence=fact.confidence,
        valid_from=valid_from,
        source_session_ids=[provenance.chat_id],
        source_message_ids=list(provenance.message_ids),
        extractor=provenance.extractor,
        extractor_version=provenance.extractor_version,
        model=provenance.model,
        first_seen_at=provenance.seen_at,
        last_seen_at=provenance.seen_at,
    )


def provenance_for(
    run: ExtractionRun,
    *,
    seen_at: dt.datetime,
    extractor: str,
    extractor_version: str,
    model: str | None,
) -> Provenance:
    ids = (run.message_id,) + ((run.reply_message_id,) if run.reply_message_id else ())
    return Provenance(
        tenant_id=run.tenant_id,
        user_id=run.user_id,
        chat_id=run.session_id,
        message_ids=ids,
        seen_at=seen_at,
        extractor=extractor,
        extractor_version=extractor_version,
        model=model,
    )
