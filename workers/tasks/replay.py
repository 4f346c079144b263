"""Replay tasks on the `replay` queue: a dispatcher that meters turns into the broker,
and one task per turn. The use case is shared.flows.replay_extraction; the job's records
are shared.records.replay."""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery, Task, shared_task

from shared.flows.extract_turn import run_extraction
from shared.flows.replay_extraction import finish_turn, next_runs, replayable
from shared.ops.broker import read_broker
from workers import queues
from workers.celery_app import TransientRetry, is_last_attempt
from workers.runtime import get_runtime

# Set by `tiermem worker --replay-concurrency N`, whose one thread pool takes live and
# replay queues: at most N replay turns run at once; one more goes back to the broker
# for a second instead of holding a thread live turns need.
REPLAY_SLOTS: threading.BoundedSemaphore | None = None


@shared_task(name=queues.REPLAY_DISPATCH, base=TransientRetry, bind=True)
def replay_dispatch_task(self: Task, job_id: str) -> int:
    """Top the replay queue up to `max_queued`, then come back while turns remain unsent."""
    runtime = get_runtime()
    broker = read_broker(runtime.settings.redis_url, [queues.REPLAY])
    run_ids, remaining = next_runs(runtime, job_id, queued=broker.depth.get(queues.REPLAY, 0))
    for run_id in run_ids:
        self.app.tasks[queues.REPLAY_TURN].apply_async(args=[run_id])
    if remaining:
        self.apply_async(args=[job_id], countdown=runtime.settings.replay.dispatch_interval_s)
    return len(run_ids)


# Its rate limit (TIERMEM_REPLAY__RATE_LIMIT) is the app's: make_celery annotates it.
@shared_task(name=queues.REPLAY_TURN, base=TransientRetry, bind=True)
def replay_turn_task(self: Task, run_id: str) -> dict[str, Any]:
    runtime = get_runtime()
    found = replayable(runtime, run_id)
    if isinstance(found, str):
        return {"run_id": run_id, "status": found}
    slots = REPLAY_SLOTS
    if slots is not None and not slots.acquire(blocking=False):
        # A fresh message, not a retry: it must not count against the retry budget.
        self.apply_async(args=[run_id], countdown=1)
        return {"run_id": run_id, "status": "deferred"}
    try:
        outcome = run_extraction(
            runtime, run_id, last_attempt=is_last_attempt(self), worker=self.request.hostname
        )
    finally:
        if slots is not None:
            slots.release()
    job_id, user_id = found
    finish_turn(runtime=runtime, job_id=job_id, user_id=user_id)
    return outcome.as_dict()


def start_replay(app: Celery, job_id: str) -> None:
    """Call after the job's runs committed (POST /v1/replay, its resume, the CLI)."""
    app.tasks[queues.REPLAY_DISPATCH].apply_async(args=[job_id])
