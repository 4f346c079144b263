"""A tenant's webhook subscriptions: created, listed, changed, deleted, pinged. What the
/v1/webhooks routes call, one function each."""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
from urllib.parse import urlsplit

import httpx
from sqlalchemy import delete, func
from sqlmodel import Session, col, select

from shared.config import Settings
from shared.db.models import Webhook, WebhookDelivery, utcnow
from shared.errors import InvalidInput, NotFound
from shared.records.events import EVENT_TYPES, PING, envelope, new_event_id, newest_seq
from shared.webhooks.models import (
    PingResult,
    WebhookCreated,
    WebhookIn,
    WebhookList,
    WebhookPublic,
    WebhookUpdate,
)
from shared.webhooks.signing import new_secret, secret_problem, signed_headers

PENDING = "pending"
DELIVERED = "delivered"


def create_webhook(
    *, session: Session, settings: Settings, tenant_id: str, body: WebhookIn
) -> WebhookCreated:
    """A subscription from now on: it gets the events recorded after it was made."""
    url = check_url(body.url, settings)
    events = check_events(body.events)
    secret = body.secret if body.secret is not None else new_secret()
    _check_secret(secret)
    row = Webhook(
        tenant_id=tenant_id,
        url=url,
        events=events,
        secret=secret,
        description=body.description,
        cursor=newest_seq(session),
    )
    session.add(row)
    session.commit()
    return WebhookCreated.model_validate({**row.model_dump(), "pending": 0, "secret": secret})


def list_webhooks(*, session: Session, tenant_id: str | None) -> WebhookList:
    query = select(Webhook).order_by(col(Webhook.created_at))
    if tenant_id is not None:
        query = query.where(Webhook.tenant_id == tenant_id)
    rows = session.exec(query).all()
    owed = pending_counts(session)
    data = [WebhookPublic.of(r, pending=owed.get(r.id, 0)) for r in rows]
    return WebhookList(data=data, count=len(data))


def find_webhook(*, session: Session, webhook_id: str, tenant_id: str | None) -> Webhook:
    """tenant_id None (the operator) reaches every tenant's; another tenant's is 404."""
    row = session.get(Webhook, webhook_id)
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise NotFound(f"webhook {webhook_id} not found", details={"webhook_id": webhook_id})
    return row


def get_webhook(*, session: Session, webhook_id: str, tenant_id: str | None) -> WebhookPublic:
    row = find_webhook(session=session, webhook_id=webhook_id, tenant_id=tenant_id)
    return WebhookPublic.of(row, pending=pending_counts(session, row.id).get(row.id, 0))


def update_webhook(
    *,
    session: Session,
    settings: Settings,
    webhook_id: str,
    tenant_id: str | None,
    body: WebhookUpdate,
) -> WebhookPublic:
    row = find_webhook(session=session, webhook_id=webhook_id, tenant_id=tenant_id)
    if body.url is not None:
        row.url = check_url(body.url, settings)
    if body.events is not None:
        row.events = check_events(body.events)
    if body.description is not None:
        row.description = body.description
    if body.secret is not None:
        _check_secret(body.secret)
        row.secret = body.secret
    if body.enabled is not None:
        if body.enabled and not row.enabled:
            # Back on: its failures are forgotten and what waited is due now.
            row.disabled_reason = row.disabled_at = row.failing_since = None
            row.consecutive_failures = 0
            session.execute(
                WebhookDelivery.__table__.update()  # type: ignore[attr-defined]
                .where(
                    col(WebhookDelivery.webhook_id) == row.id,
                    col(WebhookDelivery.status) == PENDING,
                )
                .values(next_attempt_at=utcnow())
            )
        row.enabled = body.enabled
    row.updated_at = utcnow()
    session.add(row)
    session.commit()
    return WebhookPublic.of(row, pending=pending_counts(session, row.id).get(row.id, 0))


def delete_webhook(*, session: Session, webhook_id: str, tenant_id: str | None) -> None:
    """The subscription and what it was still owed (the events stay in the feed)."""
    row = find_webhook(session=session, webhook_id=webhook_id, tenant_id=tenant_id)
    session.execute(delete(WebhookDelivery).where(col(WebhookDelivery.webhook_id) == row.id))
    session.delete(row)
    session.commit()


def ping_webhook(
    *, session: Session, settings: Settings, webhook_id: str, tenant_id: str | None
) -> PingResult:
    """A signed `webhook.test` event sent now, from this process, answered with what the
    receiver said. Not stored and not counted against the subscription."""
    row = find_webhook(session=session, webhook_id=webhook_id, tenant_id=tenant_id)
    msg_id = new_event_id()
    now = dt.datetime.now(dt.UTC)
    body = envelope(PING, now, {"tenant_id": row.tenant_id, "webhook_id": row.id})
    headers = signed_headers(secret=row.secret, msg_id=msg_id, body=body, at=now)
    started = time.perf_counter()
    status: int | None = None
    error: str | None = None
    try:
        with httpx.Client(timeout=settings.webhooks.timeout_s, follow_redirects=False) as client:
            status = client.post(row.url, content=body.encode(), headers=headers).status_code
        if not 200 <= status < 300:
            error = f"HTTP {status}"
    except httpx.HTTPError as exc:
        error = describe(exc)
    return PingResult(
        delivered=error is None,
        status_code=status,
        error=error,
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
        webhook_id=msg_id,
    )


def pending_counts(session: Session, webhook_id: str | None = None) -> dict[str, int]:
    query = (
        select(WebhookDelivery.webhook_id, func.count())
        .where(col(WebhookDelivery.status) == PENDING)
        .group_by(col(WebhookDelivery.webhook_id))
    )
    if webhook_id is not None:
        query = query.where(col(WebhookDelivery.webhook_id) == webhook_id)
    return {w: int(n) for w, n in session.exec(query).all()}


def describe(exc: httpx.HTTPError) -> str:
    """An HTTP failure in a line: the kind, then what the library said."""
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"[:500]


def check_url(url: str, settings: Settings) -> str:
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018  (parsed only here: a port out of range raises)
    except ValueError as exc:
        raise InvalidInput(f"url is not a URL: {exc}", details={"field": "url"}) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(
            f"url must be an http:// or https:// URL with a host, got {url!r}",
            details={"field": "url"},
        )
    if parts.username or parts.password:
        raise InvalidInput("url must not carry a user or password", details={"field": "url"})
    allowed = settings.webhooks.allow_private_urls or settings.environment == "development"
    if not allowed and _private(parts.hostname):
        raise InvalidInput(
            f"url points at a private or loopback address ({parts.hostname}); set "
            "TIERMEM_WEBHOOKS__ALLOW_PRIVATE_URLS=true to allow it",
            details={"field": "url"},
        )
    return url.strip()


def check_events(events: list[str]) -> list[str]:
    unknown = [e for e in events if e not in EVENT_TYPES]
    if unknown:
        raise InvalidInput(
            f"unknown event type(s) {', '.join(map(repr, unknown))}: use any of "
            + ", ".join(EVENT_TYPES),
            details={"field": "events", "unknown": unknown, "known": list(EVENT_TYPES)},
        )
    return list(dict.fromkeys(events))


def _check_secret(secret: str) -> None:
    problem = secret_problem(secret)
    if problem is not None:
        raise InvalidInput(f"secret: {problem}", details={"field": "secret"})


def _private(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # a name: not resolved here (ADR 0027 says what that leaves open)
    return address.is_private or address.is_loopback or address.is_link_local
