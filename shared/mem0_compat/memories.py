"""mem0's memory operations over tiermem's facts: its shapes in, its shapes out.

The shapes are those of mem0's hosted API as mem0ai 2.2.1's `MemoryClient` calls it
(mem0/client/main.py) and mem0's docs describe them (docs/api-reference/memory/*.mdx,
mem0-ts/src/client/mem0.types.ts): a memory is `{id, memory, hash, metadata, categories,
user_id, created_at, updated_at}` (+ `score` in search results); a history entry is
`{id, memory_id, input, old_memory, new_memory, user_id, categories, event, metadata,
created_at, updated_at}`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import delete
from sqlmodel import Session, col, select

from shared.db.models import ExtractionRun, Fact, User, new_id, utcnow
from shared.errors import Conflict, InvalidInput, NotFound
from shared.inputs import ID_RULE, is_identifier
from shared.mem0_compat.typed import require_memory_text, typed_facts
from shared.memory.models import MemoryPublic
from shared.memory.normalize import content_hash
from shared.memory.reader import memories_public
from shared.memory.writer import point_payload
from shared.records.events import (
    MEMORY_DELETED,
    MEMORY_SUPERSEDED,
    MEMORY_UPDATED,
    fact_object,
    record_event,
)
from shared.runtime import Runtime
from shared.vectors import VectorPoint, point_id

# mem0's entities, in the order one of them names the tiermem user who owns a memory: the
# user's own id as it is, another entity's with its kind in front ("agent:support-bot").
ENTITY_KEYS = ("user_id", "agent_id", "app_id", "run_id")

Event = Literal["ADD", "UPDATE", "DELETE"]


class Mem0Memory(BaseModel):
    id: str
    memory: str
    hash: str = Field(description="md5 of the memory's text, as mem0 computes it")
    metadata: dict[str, Any] = Field(
        description="the metadata the memory came with, and under `tiermem` its type, slot, "
        "confidence, extractor and whether it is still active"
    )
    categories: list[str] = Field(description="the tiermem type: identity, preference, …")
    user_id: str
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def of(cls, memory: MemoryPublic, user_external_id: str) -> Mem0Memory:
        origin = memory.details.get("mem0") or {}
        return cls(
            id=memory.id,
            memory=memory.content,
            hash=hashlib.md5(memory.content.encode()).hexdigest(),
            metadata={
                **(origin.get("metadata") or {}),
                "tiermem": {
                    "type": memory.type,
                    "slot": memory.slot,
                    "confidence": memory.confidence,
                    "extractor": memory.extractor,
                    "active": memory.active,
                    "superseded_by": memory.superseded_by,
                    "mem0_id": origin.get("id"),
                },
            },
            categories=[memory.type],
            user_id=user_external_id,
            created_at=memory.first_seen_at,
            updated_at=memory.last_seen_at,
        )


class Mem0Hit(Mem0Memory):
    score: float


class Mem0History(BaseModel):
    id: str
    memory_id: str
    input: list[dict[str, Any]]
    old_memory: str | None
    new_memory: str | None
    user_id: str
    categories: list[str]
    event: Event
    metadata: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime


def owner_of(body: dict[str, Any]) -> str:
    """The tiermem user a request is about: from its top-level entity ids or its `filters`
    (mem0's v3 API wants them there, also inside `AND`)."""
    for source in (body, *_filter_dicts(body.get("filters"))):
        for key in ENTITY_KEYS:
            value = source.get(key)
            if isinstance(value, str) and value and value != "*":
                owner = value if key == "user_id" else f"{key.removesuffix('_id')}:{value}"
                if not is_identifier(owner):
                    raise InvalidInput(f"{key}: invalid id; use {ID_RULE}", details={key: value})
                return owner
    raise InvalidInput(
        "name whose memories these are: filters={'user_id': '...'} (or agent_id, app_id, run_id)",
        details={"accepted": list(ENTITY_KEYS)},
    )


def _filter_dicts(filters: Any) -> list[dict[str, Any]]:
    if isinstance(filters, dict):
        found = [filters]
        for key in ("AND", "OR"):
            for part in filters.get(key) or []:
                found += _filter_dicts(part)
        return found
    return []


def as_mem0(session: Session, rows: Sequence[Fact], user: User) -> list[Mem0Memory]:
    return [Mem0Memory.of(m, user.external_id) for m in memories_public(session, rows)]


def find_memory(*, session: Session, tenant_id: str, memory_id: str) -> tuple[Fact, User]:
    """A memory of the tenant by id alone (mem0's routes name no user)."""
    row = session.get(Fact, memory_id)
    user = session.get(User, row.user_id) if row is not None else None
    if row is None or user is None or row.tenant_id != tenant_id:
        raise NotFound(f"memory {memory_id} not found", details={"memory_id": memory_id})
    return row, user


def update_memory(
    *,
    runtime: Runtime,
    session: Session,
    fact: Fact,
    user: User,
    text: str | None,
    metadata: dict[str, Any] | None,
) -> Fact:
    """mem0's update keeps the memory's id, so the row keeps it and takes the new text; the
    text it held moves to a new row, superseded by it (valid_to, superseded_by): the same
    record a supersede leaves, so history and `include_superseded` show the old value."""
    if text is not None and text.strip():
        require_memory_text(text, where="text", otherwise="send the memory's new text")
    if fact.valid_to is not None:
        raise Conflict(
            f"memory {fact.id} was superseded; update the memory that replaced it",
            details={"superseded_by": fact.superseded_by},
        )
    now = utcnow()
    facts_vectors = runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id)
    with runtime.user_locks.hold(user.id):
        session.refresh(fact)
        retired: list[str] = []
        if text is not None and text.strip() and text.strip() != fact.content:
            retired = _take_new_text(session, fact, text.strip(), now)
        if metadata is not None:
            origin = {**(fact.details.get("mem0") or {}), "metadata": metadata}
            fact.details = {**fact.details, "mem0": origin}
        fact.updated_at = fact.last_seen_at = now
        session.add(fact)
        session.flush()
        _announce(session, user, [(MEMORY_UPDATED, fact)])
        _announce(session, user, [(MEMORY_SUPERSEDED, session.get(Fact, i)) for i in retired])
        session.commit()
        vector = runtime.embedder.embed([fact.content])[0]
        facts_vectors.upsert([VectorPoint(id=fact.id, vector=vector, payload=point_payload(fact))])
        if retired:
            facts_vectors.delete(retired)
    return fact


def _take_new_text(session: Session, fact: Fact, text: str, now: dt.datetime) -> list[str]:
    digest = content_hash(text)
    twin = session.exec(
        select(Fact).where(
            Fact.user_id == fact.user_id,
            Fact.content_hash == digest,
            col(Fact.valid_to).is_(None),
            Fact.id != fact.id,
        )
    ).first()
    if twin is not None:
        raise Conflict(
            f"memory {twin.id} already says this; delete one of them instead",
            details={"memory_id": twin.id},
        )
    previous = Fact.model_validate(
        {**fact.model_dump(), "id": new_id(), "valid_to": now, "superseded_by": fact.id}
    )
    # What the new text is, by the offline rules; one typed fact keeps its type and slot.
    [first, *more] = typed_facts(text, said_at=now)
    typed = first if not more else None
    fact.content, fact.content_hash = text, digest
    fact.type = typed.type if typed and first.slot else fact.type
    fact.slot = typed.slot if typed else None
    fact.slot_value = (typed.slot_value() or None) if typed else None
    fact.details = {**(typed.details if typed else {}), **_kept(fact.details)}
    fact.valid_from = now
    retired = []
    if fact.slot:  # another value in the slot the new text names is replaced by it
        rivals = session.exec(
            select(Fact).where(
                Fact.user_id == fact.user_id,
                Fact.slot == fact.slot,
                col(Fact.valid_to).is_(None),
                Fact.id != fact.id,
            )
        ).all()
        for rival in rivals:
            rival.valid_to, rival.superseded_by, rival.updated_at = now, fact.id, now
            session.add(rival)
            retired.append(rival.id)
    session.add(previous)
    return retired


def _kept(details: dict[str, Any]) -> dict[str, Any]:
    return {"mem0": details["mem0"]} if "mem0" in details else {}


def delete_all(*, runtime: Runtime, session: Session, user: User) -> int:
    """Every memory of the user (SQL rows, then their vectors); the transcript stays."""
    facts_vectors = runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id)
    with runtime.user_locks.hold(user.id):
        rows = session.exec(select(Fact).where(Fact.user_id == user.id)).all()
        _announce(session, user, [(MEMORY_DELETED, row) for row in rows])
        result = session.execute(delete(Fact).where(col(Fact.user_id) == user.id))
        session.commit()
        facts_vectors.drop()
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _announce(session: Session, user: User, changes: Sequence[tuple[str, Fact | None]]) -> None:
    """memory.* events in the transaction of the change (ADR 0027)."""
    for type_, row in changes:
        if row is not None:
            record_event(
                session,
                tenant_id=user.tenant_id,
                user_id=user.id,
                type_=type_,
                data={"memory": fact_object(row)},
            )


def history(*, session: Session, fact: Fact, user: User) -> list[Mem0History]:
    """The versions of a memory: the facts it superseded (and those they did), itself, and
    what superseded it, oldest first: ADD, then an UPDATE per later version, and a DELETE
    when the newest version is retired without a successor (it was deleted since)."""
    chain = {fact.id: fact}
    frontier = [fact.id]
    while frontier:  # backwards: what each version replaced
        older = session.exec(
            select(Fact).where(Fact.user_id == user.id, col(Fact.superseded_by).in_(frontier))
        ).all()
        frontier = [r.id for r in older if r.id not in chain]
        chain.update({r.id: r for r in older})
    newest = fact
    while newest.superseded_by and newest.superseded_by not in chain:  # forwards
        successor = session.get(Fact, newest.superseded_by)
        if successor is None:
            break
        chain[successor.id] = newest = successor
    versions = sorted(chain.values(), key=lambda r: (r.valid_to is None, r.valid_to, r.created_at))
    entries: list[Mem0History] = []
    previous: Fact | None = None
    for row in versions:
        at = previous.valid_to if previous is not None and previous.valid_to else row.first_seen_at
        entries.append(_entry(fact, user, row, previous, "UPDATE" if previous else "ADD", at))
        previous = row
    last = versions[-1]
    if last.valid_to is not None and session.get(Fact, last.superseded_by or "") is None:
        entries.append(_entry(fact, user, None, last, "DELETE", last.valid_to))
    return entries


def _entry(
    asked: Fact,
    user: User,
    row: Fact | None,
    previous: Fact | None,
    event: Event,
    at: dt.datetime,
) -> Mem0History:
    shown = row or previous
    assert shown is not None
    return Mem0History(
        id=point_id(shown.id, event) if row is None else row.id,
        memory_id=asked.id,
        input=[],
        old_memory=previous.content if previous else None,
        new_memory=row.content if row else None,
        user_id=user.external_id,
        categories=[shown.type],
        event=event,
        metadata={"tiermem": {"fact_id": shown.id, "extractor": shown.extractor}},
        created_at=at,
        updated_at=at,
    )


def run_memories(*, session: Session, run: ExtractionRun) -> list[Fact]:
    """The facts written from a run's message (what an add's event produced)."""
    rows = session.exec(select(Fact).where(Fact.user_id == run.user_id)).all()
    return [r for r in rows if run.message_id in r.source_message_ids]
