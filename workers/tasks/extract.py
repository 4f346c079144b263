"""Extraction tasks: a run id in (or, with batching on, a session id or a batch of run ids);
the domain code in shared.flows does the work."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task, shared_task

from shared.flows.extract_batch import collect_session, run_batch_extraction
from shared.flows.extract_turn import RunOutcome, run_extraction
from workers.celery_app import TransientRetry, is_last_attempt
from workers.queues import EXTRACT_BATCH, EXTRACT_SESSION, EXTRACT_TURN
from workers.runtime import get_runtime
from workers.tasks.compress import enqueue_compression


@shared_task(name=EXTRACT_TURN, base=TransientRetry, bind=True)
def extract_turn_task(self: Task, run_id: str) -> dict[str, Any]:
    outcome = run_extraction(
        get_runtime(), run_id, last_attempt=is_last_attempt(self), worker=self.request.hostname
    )
    if outcome.batch_chat_id is not None and outcome.batch_due_in_s is not None:
        # Parked: the session's batch check, now or once the session has been quiet.
        enqueue_session_check(self.app, outcome.batch_chat_id, outcome.batch_due_in_s)
    _compress_next(self.app, [outcome])
    return outcome.as_dict()


@shared_task(name=EXTRACT_SESSION, base=TransientRetry, bind=True)
def extract_session_task(self: Task, session_id: str) -> list[list[str]]:
    batches = collect_session(get_runtime(), session_id)
    for run_ids in batches:
        self.app.tasks[EXTRACT_BATCH].apply_async(args=[run_ids])
    return batches


@shared_task(name=EXTRACT_BATCH, base=TransientRetry, bind=True)
def extract_batch_task(self: Task, run_ids: list[str]) -> list[dict[str, Any]]:
    outcomes = run_batch_extraction(
        get_runtime(), run_ids, last_attempt=is_last_attempt(self), worker=self.request.hostname
    )
    _compress_next(self.app, outcomes)
    return [outcome.as_dict() for outcome in outcomes]


def _compress_next(app: Celery, outcomes: list[RunOutcome]) -> None:
    # The flow decided which sessions' histories are over their trigger (decide_compression).
    for chat_id in {o.history_grew_chat_id for o in outcomes if o.compress_next}:
        assert chat_id is not None
        enqueue_compression(app, chat_id)


def enqueue_session_check(app: Celery, session_id: str, countdown_s: float) -> None:
    app.tasks[EXTRACT_SESSION].apply_async(args=[session_id], countdown=countdown_s or None)


def enqueue_extraction(app: Celery, run_ids: list[str]) -> None:
    """Call only after the runs' transaction committed: a worker must find the rows."""
    task = app.tasks[EXTRACT_TURN]
    for run_id in run_ids:
        task.apply_async(args=[run_id])
