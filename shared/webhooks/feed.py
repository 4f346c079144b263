"""GET /v1/events: a tenant's events in order, read from a cursor (the same rows webhooks
deliver), for backends that cannot receive webhooks."""

from __future__ import annotations

import json

from sqlmodel import Session, col, select

from shared.db.models import Event
from shared.webhooks.models import EventPage, EventPublic


def events_after(*, session: Session, tenant_id: str, after: int, limit: int) -> EventPage:
    rows = session.exec(
        select(Event)
        .where(Event.tenant_id == tenant_id, col(Event.seq) > after)
        .order_by(col(Event.seq))
        .limit(limit + 1)
    ).all()
    page = rows[:limit]
    data = []
    for row in page:
        body = json.loads(row.body)
        assert row.seq is not None
        data.append(
            EventPublic(
                cursor=row.seq,
                id=row.id,
                type=body["type"],
                timestamp=body["timestamp"],
                data=body["data"],
            )
        )
    return EventPage(
        data=data,
        next_cursor=data[-1].cursor if data else after,
        has_more=len(rows) > limit,
    )
