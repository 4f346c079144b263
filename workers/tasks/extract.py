"""extract_turn_task: a run id in; the domain code in shared.extraction does the work."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task, shared_task

from shared.flows.compress_session import over_trigger
from shared.flows.extract_turn import run_extraction
from workers.celery_app import TransientRetry, is_last_attempt
from workers.queues import EXTRACT_TURN
from workers.runtime import get_runtime
from workers.tasks.compress import enqueue_compression


@shared_task(name=EXTRACT_TURN, base=TransientRetry, bind=True)
def extract_turn_task(self: Task, run_id: str) -> dict[str, Any]:
    runtime = get_runtime()
    outcome = run_extraction(
        runtime, run_id, last_attempt=is_last_attempt(self), worker=self.request.hostname
    )
    if outcome.compress_session_id and over_trigger(runtime, outcome.compress_session_id):
        # Every path that stores a reply (turns, chat, imports) ends here, so compression
        # is checked once per turn without each route having to remember it; the check is
        # cheaper than a task that would mostly find nothing to do.
        enqueue_compression(self.app, outcome.compress_session_id)
    return outcome.as_dict()


def enqueue_extraction(app: Celery, run_ids: list[str]) -> None:
    """Call only after the runs' transaction committed: a worker must find the rows."""
    task = app.tasks[EXTRACT_TURN]
    for run_id in run_ids:
        task.apply_async(args=[run_id])
