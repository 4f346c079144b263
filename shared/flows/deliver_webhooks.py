"""Webhook delivery as the workers run it: a dispatch pass (new events fanned out to the
subscriptions, due deliveries claimed) and one delivery attempt (ADR 0027)."""

from __future__ import annotations

from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from shared.errors import TransientError
from shared.runtime import Runtime
from shared.webhooks.delivery import claim_due, deliver, fan_out, has_work


def dispatch_webhooks(runtime: Runtime) -> list[str]:
    """The deliveries to send now (claimed, so no other pass sends them meanwhile)."""
    try:
        with Session(runtime.read_engine) as session:
            if not has_work(session):
                return []
        with Session(runtime.engine, expire_on_commit=False) as session:
            fan_out(session)
            return claim_due(session, runtime.settings.webhooks)
    except OperationalError as exc:  # a busy database: the next pass does it
        raise TransientError(f"database error while dispatching webhooks: {exc.orig}") from exc


def deliver_webhook(runtime: Runtime, delivery_id: str) -> str:
    """One attempt; a failure is recorded and retried later by a dispatch pass, not here."""
    return deliver(
        runtime.engine, delivery_id, runtime.settings.webhooks, read_engine=runtime.read_engine
    )
