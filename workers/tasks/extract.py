"""extract_turn_task: a run id in; the domain code in shared.extraction does the work."""

from __future__ import annotations

from typing import Any

from celery import Task

from shared.config import get_settings
from shared.errors import TransientError
from shared.extraction.pipeline import run_extraction
from workers.celery_app import app
from workers.runtime import get_runtime


@app.task(
    bind=True,
    name="tiermem.extract_turn",
    autoretry_for=(TransientError,),
    retry_backoff=True,
    retry_backoff_max=get_settings().worker.retry_backoff_max_s,
    retry_jitter=True,
    max_retries=get_settings().worker.max_retries,
)
def extract_turn_task(self: Task, run_id: str) -> dict[str, Any]:
    last = self.request.retries >= (self.max_retries or 0)
    outcome = run_extraction(get_runtime(), run_id, last_attempt=last)
    if outcome.compress_session_id:
        # Every path that stores a reply (turns, chat, imports) ends here, so compression
        # is checked once per turn without each route having to remember it.
        from workers.tasks.compress import enqueue_compression

        enqueue_compression(outcome.compress_session_id)
    return outcome.as_dict()


def enqueue_extraction(run_ids: list[str]) -> None:
    """Call only after the runs' transaction committed: a worker must find the rows."""
    for run_id in run_ids:
        extract_turn_task.apply_async(args=[run_id])
