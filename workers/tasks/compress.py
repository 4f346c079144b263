"""compress_session_task: a session id in; shared.compression checks the trigger, runs the loop."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task, shared_task

from shared.flows.compress_session import compress_session
from workers.celery_app import TransientRetry, is_last_attempt
from workers.queues import COMPRESS_SESSION
from workers.runtime import get_runtime


@shared_task(name=COMPRESS_SESSION, base=TransientRetry, bind=True)
def compress_session_task(self: Task, session_id: str, run_id: str | None = None) -> dict[str, Any]:
    outcome = compress_session(
        get_runtime(), session_id, run_id=run_id, last_attempt=is_last_attempt(self)
    )
    if outcome.next_run_id:  # progress was made but the loop hit max_iterations: go on
        enqueue_compression(self.app, session_id, outcome.next_run_id)
    return outcome.as_dict()


def enqueue_compression(app: Celery, session_id: str, run_id: str | None = None) -> None:
    """After the commit: the worker re-reads the session (and the run) from SQL."""
    app.tasks[COMPRESS_SESSION].apply_async(args=[session_id], kwargs={"run_id": run_id})
