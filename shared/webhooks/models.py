"""Webhook subscriptions and the events feed as clients send and see them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from shared.db.models import Webhook
from shared.inputs import RequestModel

EVENTS_DOC = (
    "event types to deliver: memory.added, memory.updated, memory.superseded, memory.ended, "
    "memory.deleted, extraction.failed, extraction.dropped, user.deleted, compression.done"
)
SECRET_DOC = (
    "whsec_ followed by 24-64 random bytes in base64 (Standard Webhooks); left out, one is "
    "generated and returned once in this answer"
)


class WebhookIn(RequestModel):
    url: str = Field(max_length=2000, description="http(s) URL the events are POSTed to")
    events: list[str] = Field(min_length=1, max_length=20, description=EVENTS_DOC)
    secret: str | None = Field(default=None, max_length=100, description=SECRET_DOC)
    description: str = Field(default="", max_length=200)
    tenant_id: str | None = Field(
        default=None,
        max_length=36,
        description="the operator key names the tenant; a tenant admin key's is its own",
    )


class WebhookUpdate(RequestModel):
    url: str | None = Field(default=None, max_length=2000)
    events: list[str] | None = Field(default=None, min_length=1, max_length=20)
    description: str | None = Field(default=None, max_length=200)
    enabled: bool | None = Field(
        default=None,
        description="false pauses deliveries (they wait); true resumes them, also after the "
        "subscription was disabled by persistent failure",
    )
    secret: str | None = Field(
        default=None, max_length=100, description="a new signing secret (rotation)"
    )


class WebhookPublic(BaseModel):
    id: str
    tenant_id: str
    url: str
    events: list[str]
    description: str
    enabled: bool
    disabled_reason: str | None = Field(
        description="why it was disabled by the workers (persistent failure); null otherwise"
    )
    disabled_at: dt.datetime | None
    consecutive_failures: int
    failing_since: dt.datetime | None
    last_error: str | None
    last_error_at: dt.datetime | None
    last_success_at: dt.datetime | None
    delivered_total: int
    failed_attempts_total: int
    pending: int = Field(description="deliveries owed to it now")
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def of(cls, row: Webhook, *, pending: int) -> WebhookPublic:
        return cls.model_validate({**row.model_dump(), "pending": pending})


class WebhookCreated(WebhookPublic):
    secret: str = Field(description="the signing secret: shown in this answer only")


class WebhookList(BaseModel):
    data: list[WebhookPublic]
    count: int


class PingResult(BaseModel):
    delivered: bool = Field(description="the receiver answered 2xx")
    status_code: int | None
    error: str | None
    duration_ms: float
    webhook_id: str = Field(description="the webhook-id header sent")


class EventPublic(BaseModel):
    cursor: int = Field(description="pass as `after` to read the events after this one")
    id: str = Field(description="the event's id: the webhook-id of its deliveries")
    type: str
    timestamp: str
    data: dict[str, Any]


class EventPage(BaseModel):
    data: list[EventPublic]
    next_cursor: int = Field(
        description="the cursor to ask `after` next (the last event's, or `after` itself "
        "when there was nothing new)"
    )
    has_more: bool


class DeliveryFailing(BaseModel):
    """A delivery still owed after failed attempts: what its receiver said last."""

    webhook_id: str
    event_id: str
    event_type: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: dt.datetime


class WebhookOps(BaseModel):
    """The webhooks' state for /ops: each subscription, what is owed, the last errors."""

    webhooks: list[WebhookPublic]
    pending: int = Field(description="deliveries owed, all subscriptions")
    oldest_pending_age_s: float | None
    disabled: int = Field(description="subscriptions disabled (by failure or by hand)")
    failing: list[DeliveryFailing] = Field(description="owed deliveries that failed, newest first")
