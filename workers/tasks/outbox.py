"""sweep_outbox_task (beat): re-enqueue extraction runs the broker lost."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready

from shared.db.engine import session_scope
from shared.ops.control import paused_queues
from shared.outbox import claim_lost_runs
from workers import queues
from workers.celery_app import app
from workers.runtime import get_runtime
from workers.tasks.extract import enqueue_extraction

log = logging.getLogger(__name__)


def sweep_outbox() -> int:
    runtime = get_runtime()
    if queues.EXTRACT in paused_queues(runtime.settings.redis_url):
        # Paused for maintenance: its runs wait in the broker; sending them again would
        # only stack up copies for when it resumes.
        log.info("outbox sweep skipped: the extract queue is paused")
        return 0
    with session_scope(runtime.engine) as session:
        run_ids = claim_lost_runs(session=session, settings=runtime.settings)
    enqueue_extraction(run_ids)
    if run_ids:
        log.info("outbox sweep re-enqueued %d runs", len(run_ids))
    return len(run_ids)


@app.task(name="tiermem.sweep_outbox", ignore_result=True)
def sweep_outbox_task() -> int:
    return sweep_outbox()


@worker_ready.connect
def _sweep_at_startup(**_: Any) -> None:
    # A worker coming back after an outage picks up what was lost, without waiting for beat.
    try:
        sweep_outbox()
    except Exception:
        log.exception("outbox sweep at worker start failed")
