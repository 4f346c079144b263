"""`tiermem serve`: the API and a real Celery worker (thread pool) in one process, no servers.

Embedded Qdrant lets one process own its folder, so the worker threads and the API share
one Runtime (one Qdrant client). The broker is Celery's in-memory transport unless
TIERMEM_REDIS_URL is set. A sweeper thread stands in for beat.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from celery import Celery, signals
from celery.worker import WorkController

from shared.db.engine import session_scope
from shared.records.outbox import claim_lost_runs
from shared.runtime import Runtime
from workers import queues
from workers.celery_app import make_celery
from workers.ops import AFTER_READY, OWN_QUEUES, node_name
from workers.runtime import set_runtime
from workers.tasks.extract import enqueue_extraction
from workers.tasks.webhooks import send_due_deliveries

log = logging.getLogger(__name__)


class _ThreadWorker(WorkController):  # type: ignore[misc]  # celery is untyped
    def on_consumer_ready(self, consumer: Any) -> None:
        # Only `celery worker`'s own class announces readiness; our handlers hang off it
        # (queue selection, heartbeats, starting the replay pool: workers/ops.py).
        signals.worker_ready.send(sender=consumer)


def _make_current(celery: Celery) -> None:
    # `celery worker` does this for its process; without it a task's retry is published
    # through Celery's default app (amqp://localhost) and silently lost.
    celery.set_current()
    celery.set_default()


def thread_worker(
    celery: Celery, queue_names: list[str], concurrency: int, hostname: str
) -> WorkController:
    """A Celery worker (thread pool) named `hostname` to start in a thread of this process,
    taking only `queue_names` even beside another worker of the same app
    (workers.ops.OWN_QUEUES)."""
    OWN_QUEUES[hostname] = set(queue_names)
    return _ThreadWorker(
        app=celery,
        pool="threads",
        concurrency=concurrency,
        queues=list(queues.QUEUES),  # Celery's queue selection is app-wide: select them all
        hostname=hostname,
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        loglevel=logging.WARNING,
    )


class EmbeddedWorker:
    def __init__(self, runtime: Runtime, *, concurrency: int) -> None:
        set_runtime(runtime)
        self.runtime = runtime
        # The app the API of this process sends through too (create_app(celery=...)).
        self.celery = make_celery(runtime.settings)
        _make_current(self.celery)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by `tiermem import` (SIGUSR1): sweep now
        # The sweeps run in a thread here (_sweep_loop); maintenance is taken all the same,
        # so a sweep task sent through the broker is never stranded.
        live = [queues.EXTRACT, queues.COMPRESS, queues.MAINTENANCE]
        self._worker = thread_worker(self.celery, live, concurrency, node_name("embedded"))
        # Replay has threads of its own: a backlog of old turns never takes live ones'.
        replay_threads = runtime.settings.replay.concurrency
        self._replay = thread_worker(
            self.celery, [queues.REPLAY], replay_threads, node_name("embedded-replay")
        )
        AFTER_READY[self._worker.hostname] = [self._replay.start]
        self._threads = [
            threading.Thread(target=self._worker.start, name="celery-worker", daemon=True),
            threading.Thread(target=self._sweep_loop, name="outbox-sweeper", daemon=True),
            threading.Thread(target=self._webhook_loop, name="webhook-dispatch", daemon=True),
        ]

    def start(self, *, sweeper: bool = True) -> None:
        if sweeper:
            # Nothing else runs this database's work in embedded mode: resend all pending now.
            self.sweep(resend_all=True)
        for thread in self._threads if sweeper else self._threads[:1]:
            thread.start()

    def sweep(self, *, resend_all: bool = False, pending_now: bool = False) -> int:
        """Send the database's lost work to the workers: pending runs older than the sweep's
        threshold (all of them with `pending_now`), and with `resend_all` running and
        batch-waiting ones too (at start, when nothing else can be running them or holding
        their checks)."""
        settings = self.runtime.settings
        if resend_all or pending_now:
            after = {"sweep_pending_after_s": 0.0}
            update: dict[str, object] = {}
            if resend_all:
                after["sweep_running_after_s"] = 0.0
                # Turns waiting for their session's batch too: the in-process broker lost
                # their checks; sent again, each sends its session's check (ADR 0024).
                update["extraction"] = settings.extraction.model_copy(update={"batch_quiet_s": 0.0})
            worker = settings.worker.model_copy(update=after)
            settings = settings.model_copy(update={"worker": worker, **update})
        with session_scope(self.runtime.engine) as session:
            run_ids = claim_lost_runs(session=session, settings=settings, limit=100_000)
        enqueue_extraction(self.celery, run_ids)
        return len(run_ids)

    def wake(self) -> None:
        """Sweep now rather than at the next interval: turns were stored by another process
        (`tiermem import` beside `tiermem serve`), which cannot reach this in-process broker."""
        self._wake.set()

    def _sweep_loop(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.runtime.settings.worker.sweep_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sweep(pending_now=woken)
            except Exception:
                log.exception("outbox sweep failed")

    def _webhook_loop(self) -> None:
        # Beat's webhook dispatch schedule, as _sweep_loop stands in for its sweeps.
        while not self._stop.wait(self.runtime.settings.webhooks.poll_interval_s):
            try:
                send_due_deliveries(self.celery)
            except Exception:
                log.exception("webhook dispatch failed")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._worker.stop(in_sighandler=False)
        self._replay.stop(in_sighandler=False)


def run_worker_pair(
    celery: Celery,
    queue_names: list[str],
    concurrency: int,
    replay_concurrency: int,
    hostname: str,
) -> None:
    """`tiermem worker --replay-concurrency N`: live queues and the replay queue in this one
    process (it owns the embedded Qdrant folder), until SIGTERM or SIGINT.

    One thread pool of `concurrency + N` takes both; a replay turn beyond N at once goes
    back to the broker for a second (workers.tasks.replay.REPLAY_SLOTS), so `concurrency`
    threads stay free for live turns. (Two Celery workers in one process over Redis each
    run a kombu event loop, and the live one was seen starving: docs/benchmarks.md.)
    """
    from workers.tasks import replay as replay_tasks

    _make_current(celery)
    replay_tasks.REPLAY_SLOTS = threading.BoundedSemaphore(replay_concurrency)
    threads = concurrency + replay_concurrency
    worker = thread_worker(celery, [*queue_names, queues.REPLAY], threads, hostname)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=worker.start, name="celery-worker", daemon=True).start()
    log.warning(
        "worker: %s on %d threads, at most %d of them replay", ",".join(queue_names),
        threads, replay_concurrency,
    )  # fmt: skip
    stop.wait()
    worker.stop(in_sighandler=False)  # warm shutdown: running tasks finish, the rest stay queued
