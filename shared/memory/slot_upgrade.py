"""Stored facts' slots computed again by the current schemas (migration 0008)."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError

from shared.extraction.schemas import FACT_MODELS

log = logging.getLogger(__name__)

_FACTS = sa.table(
    "facts",
    sa.column("id", sa.String),
    sa.column("user_id", sa.String),
    sa.column("type", sa.String),
    sa.column("content", sa.Text),
    sa.column("subject", sa.String),
    sa.column("confidence", sa.Float),
    sa.column("details", sa.JSON),
    sa.column("slot", sa.String),
    sa.column("quarantine_reason", sa.String),
    sa.column("valid_to", sa.DateTime),
    sa.column("superseded_by", sa.String),
    sa.column("first_seen_at", sa.DateTime),
)


def slot_of(row: Any) -> str | None:
    """The slot the current schemas give a stored fact; its old one when it no longer
    validates (a fact never loses its slot to a schema it predates)."""
    if row.quarantine_reason is not None:
        return None  # parked: a flagged fact neither retires nor is retired by a clean one
    model = FACT_MODELS.get(row.type)
    if model is None:
        return row.slot  # type: ignore[no-any-return]
    try:
        fact = model.model_validate(
            {
                **(row.details or {}),
                "type": row.type,
                "content": row.content,
                "subject": row.subject,
                "confidence": row.confidence,
            }
        )
    except ValidationError:
        return row.slot  # type: ignore[no-any-return]
    return fact.slot


def recompute_slots(connection: sa.Connection) -> dict[str, int]:
    """Rewrite every fact's slot; where two active facts now share one, the newer stays
    and the older is superseded by it. Returns {"reslotted": n, "superseded": m}."""
    rows = connection.execute(sa.select(_FACTS)).all()
    reslotted = superseded = 0
    active: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for row in rows:
        slot = slot_of(row)
        if slot != row.slot:
            connection.execute(sa.update(_FACTS).where(_FACTS.c.id == row.id).values(slot=slot))
            reslotted += 1
        if slot and row.valid_to is None:
            active[(row.user_id, slot)].append(row)
    for group in active.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda r: (r.first_seen_at, r.id))
        newest = group[-1]
        for older in group[:-1]:
            connection.execute(
                sa.update(_FACTS)
                .where(_FACTS.c.id == older.id)
                .values(valid_to=newest.first_seen_at, superseded_by=newest.id)
            )
            superseded += 1
    log.info("fact slots recomputed", extra={"reslotted": reslotted, "superseded": superseded})
    return {"reslotted": reslotted, "superseded": superseded}
