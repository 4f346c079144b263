"""Writing free-text memories (a mem0 store's, or an `infer=False` add) as typed facts.

Each memory goes through the offline rules (shared.mem0_compat.typed) and then the same
dedup/merge/supersede path as extracted facts (shared.memory.writer), under the user's lock.
Its provenance is the pseudo message id `mem0:<its id>` (and extractor `mem0-import`), so a
fact's id is determined by the mem0 id: bringing the same memories in again adds nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, col, select

from shared.db.models import Fact, User
from shared.extraction.offline import VERSION as OFFLINE_VERSION
from shared.mem0_compat.typed import typed_facts
from shared.memory.writer import (
    Provenance,
    WriteOutcome,
    apply_facts,
    mirror_to_vectors,
    record_fact_events,
)
from shared.records.users import user_for
from shared.runtime import Runtime

EXTRACTOR = "mem0-import"
SOURCE_SESSION = "mem0"


@dataclass(frozen=True)
class Mem0Record:
    """One mem0 memory: what its Qdrant payload or its export holds."""

    id: str
    memory: str
    user_id: str
    created_at: dt.datetime
    hash: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def source_id(record: Mem0Record) -> str:
    return f"mem0:{record.id}"


@dataclass
class WriteSummary:
    added: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)

    def take_all(self, other: WriteSummary) -> None:
        self.added += other.added
        self.merged += other.merged
        self.unchanged += other.unchanged
        self.superseded += other.superseded

    def take(self, outcome: WriteOutcome) -> None:
        self.take_all(
            WriteSummary(outcome.added, outcome.merged, outcome.unchanged, outcome.superseded)
        )


def write_records(
    *, runtime: Runtime, session: Session, tenant_id: str, records: Sequence[Mem0Record]
) -> WriteSummary:
    """Bring the records in, user by user, each user's in one transaction."""
    summary = WriteSummary()
    by_user: dict[str, list[Mem0Record]] = {}
    for record in records:
        by_user.setdefault(record.user_id, []).append(record)
    for user_external_id, mine in by_user.items():
        user = user_for(session=session, tenant_id=tenant_id, user_external_id=user_external_id)
        session.commit()  # the user row, before the lock: another writer may need it too
        _write_user(runtime=runtime, session=session, user=user, records=mine, summary=summary)
    return summary


def _write_user(
    *,
    runtime: Runtime,
    session: Session,
    user: User,
    records: Sequence[Mem0Record],
    summary: WriteSummary,
) -> None:
    typed = [
        (r, typed_facts(r.memory, said_at=r.created_at))
        for r in sorted(records, key=lambda r: r.created_at)  # a later value supersedes
    ]
    contents = [f.content for _, facts in typed for f in facts]
    vectors = runtime.embedder.embed(contents)
    facts_vectors = runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id)
    outcomes: list[WriteOutcome] = []
    with runtime.user_locks.hold(user.id):
        start = 0
        for record, facts in typed:
            provenance = Provenance(
                tenant_id=user.tenant_id,
                user_id=user.id,
                chat_id=SOURCE_SESSION,
                message_ids=(source_id(record),),
                seen_at=record.created_at,
                extractor=EXTRACTOR,
                extractor_version=OFFLINE_VERSION,
                model=None,
            )
            outcome = apply_facts(
                session=session,
                facts_vectors=facts_vectors,
                facts=facts,
                embeddings=vectors[start : start + len(facts)],
                provenance=provenance,
                dedup_threshold=runtime.settings.extraction.dedup_threshold,
            )
            start += len(facts)
            _remember_origin(session, outcome.added, record)
            record_fact_events(session, outcome=outcome, provenance=provenance)
            outcomes.append(outcome)
            summary.take(outcome)
        session.commit()
        mirror_to_vectors(
            session=session, facts_vectors=facts_vectors, user_id=user.id, outcomes=outcomes
        )


def _remember_origin(session: Session, fact_ids: list[str], record: Mem0Record) -> None:
    """The mem0 memory a new fact came from, in its details (what mem0's shapes show)."""
    if not fact_ids:
        return
    rows = session.exec(select(Fact).where(col(Fact.id).in_(fact_ids))).all()
    origin: dict[str, Any] = {"id": record.id, "memory": record.memory, "hash": record.hash}
    if record.metadata:
        origin["metadata"] = record.metadata
    for row in rows:
        row.details = {**row.details, "mem0": origin}
        session.add(row)
    session.flush()
