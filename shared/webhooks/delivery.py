"""Delivery of the events outbox: new events become deliveries per subscription (fan-out),
due deliveries are claimed and sent, each attempt's outcome recorded (ADR 0027).

At least once: a delivery stays pending until its receiver answers 2xx; every attempt of
it carries the event's id as webhook-id, so a receiver that keeps the ids it has seen
drops a repeat. A worker killed mid-request leaves the delivery claimed until `claim_s`
passes, then it is claimed and sent again. No transaction is open during a request.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from dataclasses import dataclass

import httpx
from sqlalchemy import ColumnElement, func, or_
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from shared.config import WebhookSettings
from shared.db.engine import session_scope
from shared.db.models import Event, Webhook, WebhookDelivery, utcnow
from shared.webhooks.signing import signed_headers
from shared.webhooks.subscriptions import DELIVERED, PENDING, describe

log = logging.getLogger(__name__)

_FAN_OUT_BATCH = 5000  # events per subscription per pass; the next pass takes the rest


def has_work(session: Session) -> bool:
    """Whether a dispatch pass would do anything: an enabled subscription with events of its
    tenant past its cursor, or a delivery due and unclaimed. Read-only (two indexed EXISTS),
    so an idle pass every second never takes SQLite's write lock."""
    now = utcnow()
    new_events = (
        select(Event.seq)
        .join(Webhook, col(Webhook.tenant_id) == col(Event.tenant_id))
        .where(col(Webhook.enabled).is_(True), col(Event.seq) > col(Webhook.cursor))
        .exists()
    )
    due = select(WebhookDelivery.id).where(*_due(now)).exists()
    return bool(session.exec(select(or_(new_events, due))).one())


def _due(now: dt.datetime) -> tuple[ColumnElement[bool], ...]:
    """A delivery owed, its retry time come, and not claimed (or its claim lapsed)."""
    return (
        col(WebhookDelivery.status) == PENDING,
        col(WebhookDelivery.next_attempt_at) <= now,
        or_(
            col(WebhookDelivery.claimed_until).is_(None),
            col(WebhookDelivery.claimed_until) <= now,
        ),
    )


def fan_out(session: Session) -> int:
    """Deliveries for the events past each enabled subscription's cursor that it asked for;
    the cursor moves past them. Committed here; returns how many deliveries were made."""
    now = utcnow()
    made = 0
    # FOR UPDATE SKIP LOCKED (PostgreSQL): two dispatchers never fan out one subscription at
    # once. SQLite's write transaction (BEGIN IMMEDIATE) already excludes the other.
    subscriptions = session.exec(
        select(Webhook).where(col(Webhook.enabled).is_(True)).with_for_update(skip_locked=True)
    ).all()
    for sub in subscriptions:
        rows = session.exec(
            select(Event.seq, Event.type)
            .where(Event.tenant_id == sub.tenant_id, col(Event.seq) > sub.cursor)
            .order_by(col(Event.seq))
            .limit(_FAN_OUT_BATCH)
        ).all()
        if not rows:
            continue
        wanted = set(sub.events)
        for seq, type_ in rows:
            assert seq is not None  # a stored event has its seq
            if type_ in wanted:
                session.add(WebhookDelivery(webhook_id=sub.id, event_seq=seq, next_attempt_at=now))
                made += 1
        sub.cursor = max(seq or 0 for seq, _ in rows)
        session.add(sub)
    session.commit()
    return made


def claim_due(session: Session, settings: WebhookSettings) -> list[str]:
    """Due deliveries of enabled subscriptions, claimed for `claim_s`, at most as many as
    keep `max_in_flight` claimed at once. Committed here."""
    now = utcnow()
    in_flight = session.exec(
        select(func.count())
        .select_from(WebhookDelivery)
        .where(WebhookDelivery.status == PENDING, col(WebhookDelivery.claimed_until) > now)
    ).one()
    room = settings.max_in_flight - int(in_flight)
    if room <= 0:
        return []
    due = session.exec(
        select(WebhookDelivery)
        .join(Webhook, col(Webhook.id) == col(WebhookDelivery.webhook_id))
        .where(*_due(now), col(Webhook.enabled).is_(True))
        .order_by(col(WebhookDelivery.event_seq))
        .limit(room)
        .with_for_update(skip_locked=True, of=WebhookDelivery)
    ).all()
    until = now + dt.timedelta(seconds=settings.claim_s)
    for delivery in due:
        delivery.claimed_until = until
        session.add(delivery)
    session.commit()
    return [d.id for d in due]


@dataclass(frozen=True)
class Attempt:
    delivered: bool
    status_code: int | None
    error: str | None


def deliver(
    engine: Engine, delivery_id: str, settings: WebhookSettings, *, read_engine: Engine
) -> str:
    """One attempt of one delivery; its outcome ("delivered", "failed", or why nothing was
    sent: "done", "gone", "paused")."""
    with Session(read_engine) as session:
        delivery = session.get(WebhookDelivery, delivery_id)
        if delivery is None:
            return "gone"
        if delivery.status == DELIVERED:
            return "done"  # a redelivered task: its work is done
        sub = session.get(Webhook, delivery.webhook_id)
        event = session.get(Event, delivery.event_seq)
        if sub is None or event is None:
            return "gone"
        if not sub.enabled:
            return "paused"
        url, secret, msg_id, body = sub.url, sub.secret, event.id, event.body
    attempt = send(url=url, secret=secret, msg_id=msg_id, body=body, timeout_s=settings.timeout_s)
    record_attempt(engine, delivery_id, attempt, settings)
    return "delivered" if attempt.delivered else "failed"


def send(*, url: str, secret: str, msg_id: str, body: str, timeout_s: float) -> Attempt:
    """One signed POST; any answer but 2xx (redirects included) is a failure."""
    headers = signed_headers(secret=secret, msg_id=msg_id, body=body, at=dt.datetime.now(dt.UTC))
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False) as client:
            response = client.post(url, content=body.encode(), headers=headers)
    except httpx.HTTPError as exc:
        return Attempt(False, None, describe(exc))
    if 200 <= response.status_code < 300:
        return Attempt(True, response.status_code, None)
    return Attempt(False, response.status_code, f"HTTP {response.status_code}")


def record_attempt(
    engine: Engine, delivery_id: str, attempt: Attempt, settings: WebhookSettings
) -> None:
    now = utcnow()
    with session_scope(engine) as session:
        delivery = session.get(WebhookDelivery, delivery_id)
        sub = session.get(Webhook, delivery.webhook_id) if delivery else None
        if delivery is None or sub is None or delivery.status == DELIVERED:
            return  # deleted meanwhile, or a twin attempt got there first
        delivery.attempts += 1
        delivery.claimed_until = None
        delivery.last_status_code = attempt.status_code
        if attempt.delivered:
            delivery.status, delivery.delivered_at = DELIVERED, now
            delivery.last_error = None
            sub.delivered_total += 1
            sub.consecutive_failures, sub.failing_since = 0, None
            sub.last_success_at = now
        else:
            delivery.last_error = attempt.error
            delivery.next_attempt_at = now + dt.timedelta(
                seconds=backoff_s(delivery.attempts, settings)
            )
            _count_failure(sub, attempt.error or "failed", now, settings)
            log.warning(
                "webhook delivery failed",
                extra={
                    "webhook_id": sub.id,
                    "delivery_id": delivery.id,
                    "attempts": delivery.attempts,
                    "error": attempt.error,
                },
            )
        sub.updated_at = now
        session.add(delivery)
        session.add(sub)


def backoff_s(attempts: int, settings: WebhookSettings) -> float:
    """retry_base_s x 2^(attempts-1), capped at retry_max_s, plus up to 20 % jitter."""
    base = min(settings.retry_max_s, settings.retry_base_s * 2 ** min(attempts - 1, 30))
    return float(base) * (1 + 0.2 * random.random())


def _count_failure(sub: Webhook, error: str, now: dt.datetime, settings: WebhookSettings) -> None:
    sub.failed_attempts_total += 1
    sub.consecutive_failures += 1
    sub.failing_since = sub.failing_since or now
    sub.last_error, sub.last_error_at = error[:1000], now
    since = _aware(sub.failing_since)
    failing_for = (now - since).total_seconds()
    if (
        sub.enabled
        and sub.consecutive_failures >= settings.disable_after_failures
        and failing_for >= settings.disable_after_s
    ):
        sub.enabled = False
        sub.disabled_at = now
        sub.disabled_reason = (
            f"disabled after {sub.consecutive_failures} failed attempts in a row over "
            f"{failing_for:.0f} s (last: {error[:200]}); PATCH enabled=true to resume"
        )
        log.warning("webhook disabled", extra={"webhook_id": sub.id, "error": error})


def _aware(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
