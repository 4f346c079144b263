"""sweep_outbox_task (beat): re-enqueue extraction runs the broker lost."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, Task, shared_task
from celery.signals import worker_ready

from shared.db.engine import session_scope
from shared.ops.control import paused_queues
from shared.records.outbox import claim_lost_runs
from workers import queues
from workers.runtime import get_runtime
from workers.tasks.extract import enqueue_extraction

log = logging.getLogger(__name__)


def sweep_outbox(app: Celery) -> int:
    runtime = get_runtime()
    if queues.EXTRACT in paused_queues(runtime.settings.redis_url):
        # Paused for maintenance: its runs wait in the broker; sending them again would
        # only stack up copies for when it resumes.
        log.info("outbox sweep skipped: the extract queue is paused")
        return 0
    with session_scope(runtime.engine) as session:
        run_ids = claim_lost_runs(session=session, settings=runtime.settings)
    enqueue_extraction(app, run_ids)
    if run_ids:
        log.info("outbox sweep re-enqueued %d runs", len(run_ids))
    return len(run_ids)


@shared_task(name=queues.SWEEP_OUTBOX, ignore_result=True, bind=True)
def sweep_outbox_task(self: Task) -> int:
    return sweep_outbox(self.app)


@worker_ready.connect
def _sweep_at_startup(sender: Any, **_: Any) -> None:
    # A worker coming back after an outage picks up what was lost, without waiting for beat.
    try:
        sweep_outbox(sender.app)
    except Exception:
        log.exception("outbox sweep at worker start failed")
