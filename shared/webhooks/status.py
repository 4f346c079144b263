"""The webhooks as ops shows them (GET /v1/ops/webhooks, the /ops page, /metrics)."""

from __future__ import annotations

from sqlalchemy import func
from sqlmodel import Session, col, select

from shared.db.models import Event, Webhook, WebhookDelivery, utcnow
from shared.webhooks.models import DeliveryFailing, WebhookOps
from shared.webhooks.subscriptions import PENDING, list_webhooks


def webhook_ops(*, session: Session, tenant_id: str | None, failing_limit: int = 20) -> WebhookOps:
    listed = list_webhooks(session=session, tenant_id=tenant_id)
    oldest_query = select(func.min(WebhookDelivery.created_at)).where(
        WebhookDelivery.status == PENDING
    )
    failing_query = (
        select(WebhookDelivery, Event.id, Event.type)
        .join(Event, col(Event.seq) == col(WebhookDelivery.event_seq))
        .where(WebhookDelivery.status == PENDING, col(WebhookDelivery.attempts) > 0)
        .order_by(col(WebhookDelivery.next_attempt_at).desc())
        .limit(failing_limit)
    )
    if tenant_id is not None:
        mine = select(Webhook.id).where(Webhook.tenant_id == tenant_id)
        oldest_query = oldest_query.where(col(WebhookDelivery.webhook_id).in_(mine))
        failing_query = failing_query.where(col(WebhookDelivery.webhook_id).in_(mine))
    oldest = session.exec(oldest_query).one()
    age = None
    if oldest is not None:
        if oldest.tzinfo is None:
            oldest = oldest.replace(tzinfo=utcnow().tzinfo)
        age = round((utcnow() - oldest).total_seconds(), 1)
    failing = [
        DeliveryFailing(
            webhook_id=d.webhook_id,
            event_id=event_id,
            event_type=event_type,
            attempts=d.attempts,
            last_status_code=d.last_status_code,
            last_error=d.last_error,
            next_attempt_at=d.next_attempt_at,
        )
        for d, event_id, event_type in session.exec(failing_query).all()
    ]
    return WebhookOps(
        webhooks=listed.data,
        pending=sum(w.pending for w in listed.data),
        oldest_pending_age_s=age,
        disabled=sum(not w.enabled for w in listed.data),
        failing=failing,
    )
