"""The Celery application: Redis broker (in-process for `tiermem serve`), JSON only, late acks."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task

from shared.config import Settings, get_settings
from shared.errors import TransientError
from workers import queues


def make_celery(settings: Settings) -> Celery:
    embedded = not settings.redis_url
    app = Celery(
        "tiermem",
        include=[
            "workers.tasks.extract",
            "workers.tasks.outbox",
            "workers.tasks.compress",
            "workers.tasks.replay",
            "workers.ops",
        ],
    )
    app.conf.update(
        # Without Redis only the one-process `tiermem serve` works: its worker threads
        # share this process's in-memory broker.
        broker_url=settings.redis_url or "memory://",
        result_backend=settings.redis_url,
        result_expires=3600,
        task_ignore_result=True,  # job state lives in SQL (GET /v1/jobs/{id})
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_routes=queues.TASK_ROUTES,
        task_default_queue=queues.EXTRACT,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_send_task_events=settings.worker.task_events,  # for Flower's task pages
        # No task-sent event: one more Redis publish on every turn's request path, and
        # the pending count is read from SQL anyway.
        task_send_sent_event=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options=(
            {"polling_interval": 0.01}
            if embedded
            else {"visibility_timeout": settings.redis.visibility_timeout_s}
        ),
        beat_schedule_filename=str(settings.data_dir / "celerybeat-schedule"),
        beat_schedule={
            "sweep-outbox": {
                "task": "tiermem.sweep_outbox",
                "schedule": settings.worker.sweep_interval_s,
            }
        },
    )
    return app


app = make_celery(get_settings())

# Every tiermem task retries transient errors (timeouts, 429/5xx, lock waits, a busy
# database) with exponential backoff and jitter; anything else is recorded, not retried.
TRANSIENT_RETRY: dict[str, Any] = {
    "bind": True,
    "autoretry_for": (TransientError,),
    "retry_backoff": True,
    "retry_backoff_max": get_settings().worker.retry_backoff_max_s,
    "retry_jitter": True,
    "max_retries": get_settings().worker.max_retries,
}


def is_last_attempt(task: Task) -> bool:
    """True on the attempt after which a transient error becomes the run's final failure."""
    return bool(task.request.retries >= (task.max_retries or 0))
