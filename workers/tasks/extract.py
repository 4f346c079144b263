"""extract_turn_task: a run id in; the domain code in shared.extraction does the work."""

from __future__ import annotations

from typing import Any

from celery import Task

from shared.flows.compress_session import over_trigger
from shared.flows.extract_turn import run_extraction
from workers.celery_app import TRANSIENT_RETRY, app, is_last_attempt
from workers.runtime import get_runtime
from workers.tasks.compress import enqueue_compression


@app.task(name="tiermem.extract_turn", **TRANSIENT_RETRY)
def extract_turn_task(self: Task, run_id: str) -> dict[str, Any]:
    runtime = get_runtime()
    outcome = run_extraction(
        runtime, run_id, last_attempt=is_last_attempt(self), worker=self.request.hostname
    )
    if outcome.compress_session_id and over_trigger(runtime, outcome.compress_session_id):
        # Every path that stores a reply (turns, chat, imports) ends here, so compression
        # is checked once per turn without each route having to remember it; the check is
        # cheaper than a task that would mostly find nothing to do.
        enqueue_compression(outcome.compress_session_id)
    return outcome.as_dict()


def enqueue_extraction(run_ids: list[str]) -> None:
    """Call only after the runs' transaction committed: a worker must find the rows."""
    for run_id in run_ids:
        extract_turn_task.apply_async(args=[run_id])
