"""Webhook tasks: a dispatch pass (beat, every TIERMEM_WEBHOOKS__POLL_INTERVAL_S) and one
delivery attempt; both on the maintenance queue, a bounded number in it at once."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, Task, shared_task
from celery.signals import worker_ready

from shared.flows.deliver_webhooks import deliver_webhook, dispatch_webhooks
from workers import queues
from workers.runtime import get_runtime

log = logging.getLogger(__name__)


def send_due_deliveries(app: Celery) -> int:
    delivery_ids = dispatch_webhooks(get_runtime())
    task = app.tasks[queues.DELIVER_WEBHOOK]
    for delivery_id in delivery_ids:
        task.apply_async(args=[delivery_id])
    return len(delivery_ids)


@shared_task(name=queues.DISPATCH_WEBHOOKS, ignore_result=True, bind=True)
def dispatch_webhooks_task(self: Task) -> int:
    return send_due_deliveries(self.app)


# Not TransientRetry: a failed attempt is rescheduled in SQL (next_attempt_at), which
# outlives a worker restart; the task itself only ever makes one attempt.
@shared_task(name=queues.DELIVER_WEBHOOK, ignore_result=True)
def deliver_webhook_task(delivery_id: str) -> str:
    return deliver_webhook(get_runtime(), delivery_id)


@worker_ready.connect
def _dispatch_at_startup(sender: Any, **_: Any) -> None:
    try:
        send_due_deliveries(sender.app)
    except Exception:
        log.exception("webhook dispatch at worker start failed")
