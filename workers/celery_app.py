"""The Celery application, built from the settings by each process that needs one (the
worker and beat commands, `tiermem serve`, the API's producer): Redis broker (in-process for
`tiermem serve`), JSON only, late acks. The tasks are `shared_task`s, bound to no app of
their own: each app built here takes them all."""

from __future__ import annotations

from celery import Celery, Task

from shared.config import Settings, WorkerSettings
from shared.errors import TransientError
from workers import queues

# The modules whose tasks and worker signals an app's workers load.
TASK_MODULES = [
    "workers.tasks.extract",
    "workers.tasks.outbox",
    "workers.tasks.compress",
    "workers.tasks.replay",
    "workers.tasks.webhooks",
    "workers.ops",
]


def make_celery(settings: Settings) -> Celery:
    embedded = not settings.redis_url
    app = Celery("tiermem", include=TASK_MODULES)
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
        task_annotations=(
            {queues.REPLAY_TURN: {"rate_limit": settings.replay.rate_limit}}
            if settings.replay.rate_limit
            else None
        ),
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
                "task": queues.SWEEP_OUTBOX,
                "schedule": settings.worker.sweep_interval_s,
            },
            "dispatch-webhooks": {
                "task": queues.DISPATCH_WEBHOOKS,
                "schedule": settings.webhooks.poll_interval_s,
                # A pass not taken before the next is due is dropped, not stacked up.
                "options": {"expires": settings.webhooks.poll_interval_s},
            },
        },
        # Read by TransientRetry when a task binds to this app.
        tiermem_max_retries=settings.worker.max_retries,
        tiermem_retry_backoff_max=settings.worker.retry_backoff_max_s,
    )
    return app


_DEFAULTS = WorkerSettings()


class TransientRetry(Task):  # type: ignore[misc]  # celery is untyped
    """The base of every tiermem task that does work: transient errors (timeouts, 429/5xx,
    lock waits, a busy database) retry with exponential backoff and jitter, within the
    limits of the settings the task's app was built with; anything else is recorded, not
    retried."""

    autoretry_for = (TransientError,)
    retry_backoff = True
    retry_jitter = True

    @classmethod
    def on_bound(cls, app: Celery) -> None:
        # Celery calls this on each app's own copy of the task class, before it wraps
        # the task in its retry loop (which reads retry_backoff_max then).
        # An app not built by make_celery (Celery's default one) gets the settings' defaults.
        cls.max_retries = app.conf.get("tiermem_max_retries", _DEFAULTS.max_retries)
        cls.retry_backoff_max = app.conf.get(
            "tiermem_retry_backoff_max", _DEFAULTS.retry_backoff_max_s
        )


def is_last_attempt(task: Task) -> bool:
    """True on the attempt after which a transient error becomes the run's final failure."""
    return bool(task.request.retries >= (task.max_retries or 0))
