"""Stored facts' slots computed again by the current schemas (migration 0008)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError

from shared.extraction.schemas import FACT_MODELS

log = logging.getLogger(__name__)

USERS_PER_BATCH = 500

_FACTS = sa.table(
    "facts",
    sa.column("id", sa.String),
    sa.column("user_id", sa.String),
    sa.column("type", sa.String),
    sa.column("subject", sa.String),
    sa.column("details", sa.JSON),
    sa.column("slot", sa.String),
    sa.column("quarantine_reason", sa.String),
    sa.column("valid_to", sa.DateTime),
    sa.column("superseded_by", sa.String),
    sa.column("first_seen_at", sa.DateTime),
)


def slot_of(row: Any) -> tuple[str | None, bool]:
    """The slot the current schemas give a stored fact, and whether they could read it; a
    fact they cannot read keeps its old slot (which no new fact will ever share)."""
    if row.quarantine_reason is not None:
        return None, True  # parked: a flagged fact neither retires nor is retired
    model = FACT_MODELS.get(row.type)
    fields = {"type": row.type, "content": "...", "subject": row.subject, "confidence": 0.5}
    try:
        if model is None:
            raise ValueError(row.type)
        return model.model_validate({**(row.details or {}), **fields}).slot, True
    except (ValidationError, ValueError):
        return row.slot, False


def _users_facts(connection: sa.Connection) -> Iterator[Sequence[Any]]:
    """Every fact, a few hundred users at a time (keyset over user ids), so that a user's
    facts are always in one batch and memory stays flat on any table size."""
    after = ""
    while True:
        users = (
            connection.execute(
                sa.select(_FACTS.c.user_id)
                .where(_FACTS.c.user_id > after)
                .group_by(_FACTS.c.user_id)
                .order_by(_FACTS.c.user_id)
                .limit(USERS_PER_BATCH)
            )
            .scalars()
            .all()
        )
        if not users:
            return
        yield connection.execute(sa.select(*_FACTS.c).where(_FACTS.c.user_id.in_(users))).all()
        after = users[-1]


def recompute_slots(connection: sa.Connection) -> dict[str, int]:
    """Rewrite every fact's slot; where two active facts of a user now share one, the newer
    stays and the older is superseded by it. Returns the counts, also logged.

    Superseded facts keep their vectors until `tiermem reindex` (every read joins SQL's
    active rows, so searches skip them)."""
    by_id = sa.update(_FACTS).where(_FACTS.c.id == sa.bindparam("fid"))
    counts = {"reslotted": 0, "superseded": 0, "unreadable": 0}
    for rows in _users_facts(connection):
        changed, active = [], defaultdict(list)
        for row in rows:
            slot, readable = slot_of(row)
            counts["unreadable"] += not readable
            if slot != row.slot:
                changed.append({"fid": row.id, "new_slot": slot})
            if slot and row.valid_to is None:
                active[(row.user_id, slot)].append(row)
        if changed:
            connection.execute(by_id.values(slot=sa.bindparam("new_slot")), changed)
            counts["reslotted"] += len(changed)
        retire = []
        for group in active.values():
            group.sort(key=lambda r: (r.first_seen_at, r.id))
            newest = group[-1]
            retire += [
                {"fid": r.id, "at": newest.first_seen_at, "by": newest.id} for r in group[:-1]
            ]
        if retire:
            values: dict[str, Any] = {
                "valid_to": sa.bindparam("at"),
                "superseded_by": sa.bindparam("by"),
            }
            connection.execute(by_id.values(**values), retire)
            counts["superseded"] += len(retire)
    log.info("fact slots recomputed", extra=counts)
    return counts
