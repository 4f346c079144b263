"""Events: what changed, written in the transaction of the change (the outbox behind webhooks
and the GET /v1/events feed, ADR 0027).

Recording one is a row insert into the caller's open transaction; nothing here touches the
network, so a write path never waits on a receiver. Within a tenant, `seq` order is commit
order: SQLite writes one transaction at a time, and on PostgreSQL an event-writing
transaction takes its tenant's advisory lock until it commits, so a reader that has seen
seq N never later finds a smaller seq of that tenant appear (the feed's cursor and the
webhooks' fan-out both rely on it).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlmodel import Session, col

from shared.db.models import Event, Fact, User, WebhookDelivery

MEMORY_ADDED = "memory.added"
MEMORY_UPDATED = "memory.updated"
MEMORY_SUPERSEDED = "memory.superseded"
MEMORY_ENDED = "memory.ended"
MEMORY_DELETED = "memory.deleted"
EXTRACTION_FAILED = "extraction.failed"
EXTRACTION_DROPPED = "extraction.dropped"
USER_DELETED = "user.deleted"
COMPRESSION_DONE = "compression.done"
# Every type a subscription may name, and what each announces (README, ADR 0027).
EVENT_TYPES: dict[str, str] = {
    MEMORY_ADDED: "a memory was stored (extraction, an import, mem0's add)",
    MEMORY_UPDATED: "a memory was said again (mentions, provenance) or its text was edited",
    MEMORY_SUPERSEDED: "a memory was replaced by a newer value (data.memory.superseded_by)",
    MEMORY_ENDED: "a memory was ended by what the user said ('I quit') (data.memory.ended_by)",
    MEMORY_DELETED: "a memory was deleted on request",
    EXTRACTION_FAILED: "a turn's extraction failed for good (data.error)",
    EXTRACTION_DROPPED: "the model returned items for a turn and none could be kept",
    USER_DELETED: "a user and everything stored about them were deleted",
    COMPRESSION_DONE: "a session's history was compressed back under its budget",
}
# Sent only by POST /v1/webhooks/{id}/test, never stored.
PING = "webhook.test"


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def envelope(type_: str, at: dt.datetime, data: dict[str, Any]) -> str:
    """The Standard Webhooks payload shape: {type, timestamp, data}, compact JSON."""
    stamp = at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"type": type_, "timestamp": stamp, "data": data}, separators=(",", ":"))


def record_event(
    session: Session,
    *,
    tenant_id: str,
    user_id: str | None,
    type_: str,
    data: dict[str, Any],
    at: dt.datetime | None = None,
) -> Event:
    """Add one event to the caller's transaction (flushed, not committed). `data` holds the
    object; the tenant id and the user's external id are put in front of it."""
    _order_within_tenant(session, tenant_id)
    at = at or dt.datetime.now(dt.UTC)
    external = _external_user_id(session, user_id)
    row = Event(
        id=new_event_id(),
        tenant_id=tenant_id,
        user_id=user_id,
        type=type_,
        body=envelope(type_, at, {"tenant_id": tenant_id, "user_id": external, **data}),
        created_at=at,
    )
    session.add(row)
    session.flush()
    return row


def fact_object(fact: Fact, *, ended_by: str | None = None) -> dict[str, Any]:
    """A memory as events carry it: small, no vectors, no provenance lists."""
    obj: dict[str, Any] = {
        "id": fact.id,
        "type": fact.type,
        "content": fact.content,
        "confidence": fact.confidence,
        "mention_count": fact.mention_count,
        "valid_from": _stamp(fact.valid_from),
        "valid_to": _stamp(fact.valid_to),
        "superseded_by": fact.superseded_by,
    }
    if ended_by is not None:
        obj["ended_by"] = ended_by
    return obj


def forget_user_events(session: Session, user_id: str) -> int:
    """A deleted user's events leave with them (the feed and any delivery still owed): what
    they said is not kept, even in the outbox. Returns how many."""
    seqs = select(col(Event.seq)).where(col(Event.user_id) == user_id)
    session.execute(delete(WebhookDelivery).where(col(WebhookDelivery.event_seq).in_(seqs)))
    result = session.execute(delete(Event).where(col(Event.user_id) == user_id))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def newest_seq(session: Session) -> int:
    return int(session.execute(select(func.max(col(Event.seq)))).scalar() or 0)


def _order_within_tenant(session: Session, tenant_id: str) -> None:
    # PostgreSQL hands out seq values at insert, not at commit: two writers of one tenant
    # could commit 11 before 10, and a reader past 11 would never see 10. The advisory lock
    # (released at commit) makes a tenant's event writers commit in seq order. SQLite's
    # BEGIN IMMEDIATE already serializes every writer.
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"events:{tenant_id}"}
        )


def _external_user_id(session: Session, user_id: str | None) -> str | None:
    if user_id is None:
        return None
    user = session.get(User, user_id)
    return user.external_id if user is not None else None


def _stamp(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
