"""TaskQueue: everything sent to the workers from outside them, over one Celery app.

The API builds one in create_app (routes reach it through services.api.deps.TasksDep), the
CLI builds one from its settings; tasks chain through their own app. Send only what
committed: a worker must find the rows. A broker out of reach never undoes what committed:
extraction runs wait pending for the outbox sweeper; compress and replay say False (logged),
so the caller can tell its client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from celery import Celery

from shared.config import Settings
from shared.ops.control import check_queue, set_paused
from shared.ops.workers import HeartbeatStore
from workers.celery_app import make_celery
from workers.tasks.compress import enqueue_compression
from workers.tasks.extract import enqueue_extraction
from workers.tasks.replay import start_replay

log = logging.getLogger(__name__)


class TaskQueue:
    def __init__(
        self,
        settings: Settings,
        celery: Celery | None = None,
        *,
        extract: Callable[[list[str]], None] | None = None,
    ) -> None:
        """`celery`: the app to send through (`tiermem serve` shares its workers'); built
        from `settings` by default. `extract`: extraction runs sent some other way (tests)."""
        self.settings = settings
        self.celery = celery if celery is not None else make_celery(settings)
        self._extract = extract or partial(enqueue_extraction, self.celery)

    def extract(self, run_ids: list[str]) -> None:
        """One extraction task per run. Never raises: with the broker out of reach the runs
        stay pending in SQL and the outbox sweeper sends them when it is back, so the flows
        that send after their commit (the turn writer, the chat turn, imports) need no guard."""
        if not run_ids:
            return
        try:
            self._extract(run_ids)
        except Exception:
            log.warning(
                "enqueue failed; the outbox sweeper will resend %d runs",
                len(run_ids),
                exc_info=True,
            )

    def compress(self, session_id: str, run_id: str | None = None) -> bool:
        """False when it could not be sent: an automatic check only waits for the session's
        next reply; a compact request's run is the caller's to report."""
        return _sent(
            f"compression of session {session_id}",
            enqueue_compression,
            self.celery,
            session_id,
            run_id,
        )

    def replay(self, job_id: str) -> bool:
        """Start (or resume) a replay's dispatcher; False when it could not be sent (the
        job's runs stay pending: resuming the job sends them)."""
        return _sent(f"the dispatcher of replay {job_id}", start_replay, self.celery, job_id)

    def pause(self, queue: str) -> None:
        """Workers stop taking messages from the queue; they stay in the broker, nothing is lost."""
        set_paused(self.settings.redis_url, check_queue(queue), True)
        self.celery.control.cancel_consumer(queue)

    def resume(self, queue: str) -> None:
        """Only workers that consumed the queue when they started take it up again."""
        set_paused(self.settings.redis_url, check_queue(queue), False)
        heartbeats = HeartbeatStore.from_settings(self.settings).read()
        owners = [w.hostname for w in heartbeats if queue in w.configured_queues]
        if owners:
            self.celery.control.add_consumer(queue, destination=owners)


def _sent(what: str, send: Callable[..., None], *args: object) -> bool:
    try:
        send(*args)
    except Exception:
        log.warning("could not enqueue %s", what, exc_info=True)
        return False
    return True
