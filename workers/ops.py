"""Celery signal glue for ops: the heartbeat record, paused queues honoured at startup, and
the startup heap frozen (shared.heap). Pausing and resuming a queue: workers.task_queue."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from celery.signals import worker_process_init, worker_ready, worker_shutdown
from celery.utils.nodenames import default_nodename, host_format
from celery.worker import state

from shared import heap
from shared.db.models import utcnow
from shared.ops.control import paused_queues
from shared.ops.workers import ActiveTask, Heartbeat, HeartbeatStore, WorkerInfo
from workers.runtime import get_runtime

log = logging.getLogger(__name__)
_heartbeats: list[Heartbeat] = []
# Workers sharing a process (`tiermem serve`, `tiermem worker --replay-concurrency`) share
# the Celery app, whose queue selection is global; each takes only its own queues, by
# node name, once it is up.
OWN_QUEUES: dict[str, set[str]] = {}
# Started once the named worker is up: two workers connecting to the broker at the same
# moment share kombu connections in a way that crashes one of them.
AFTER_READY: dict[str, list[Callable[[], object]]] = {}
# celery.concurrency modules → the names `tiermem worker --pool` takes
POOL_NAMES = {"thread": "threads", "prefork": "prefork", "solo": "solo"}


def node_name(label: str, configured: str | None = None) -> str:
    """A worker's Celery node name: `configured` as Celery's -n takes it (`%h` is the host
    name; `@<host>` is added to a name without one), else tiermem-<label>-<pid>@<host>.
    Unique per process by default: ops keys a worker's heartbeat, and the runs it claims, by
    this name, so two workers under one name look like one, and a killed one's runs look
    held by the other."""
    if configured:
        return str(host_format(default_nodename(configured)))
    return f"tiermem-{label}-{os.getpid()}@{socket.gethostname()}"


def consumed_queues(consumer: Any) -> list[str]:
    return sorted(q.name for q in getattr(consumer.task_consumer, "queues", None) or [])


def processed_by(consumer: Any, own_queues: list[str]) -> int:
    """Tasks the worker accepted since it started. Celery counts them per process and task
    name, and two workers can share a process (`tiermem serve`), never a queue: a worker
    counts the tasks Celery's router sends to its own queues. (Copied first: a task name
    seen for the first time adds a key meanwhile.)"""
    route = consumer.app.amqp.router.route
    return sum(
        count
        for name, count in list(state.total_count.items())
        if route({}, name)["queue"].name in own_queues
    )


def describe(consumer: Any, started_at: Any, configured: list[str]) -> WorkerInfo:
    queues = consumed_queues(consumer)
    pool = consumer.pool
    # Celery's request sets are the process's: a worker's own carry its node name. (Copied
    # first, in one step: the task threads change them meanwhile.)
    active = [r for r in list(state.active_requests) if r.hostname == consumer.hostname]
    held = [r for r in list(state.reserved_requests) if r.hostname == consumer.hostname]
    return WorkerInfo(
        hostname=consumer.hostname,
        pid=os.getpid(),
        queues=queues,
        configured_queues=configured,
        pool=POOL_NAMES.get(type(pool).__module__.rsplit(".", 1)[-1], type(pool).__name__),
        concurrency=int(getattr(pool, "limit", None) or getattr(pool, "num_processes", None) or 1),
        active=len(active),
        reserved=max(0, len(held) - len(active)),
        processed=processed_by(consumer, configured),
        started_at=started_at,
        heartbeat_at=utcnow(),
        active_tasks=[
            ActiveTask(
                id=r.id,
                name=r.name,
                started_at=None,
                args=list(r.args or [])[:3],
            )
            for r in active[:20]
        ],
    )


@worker_ready.connect
def _on_ready(sender: Any, **_: Any) -> None:
    settings = get_runtime().settings
    heap.settle()  # Celery, the tasks and the runtime are loaded
    configured = consumed_queues(sender)
    own = OWN_QUEUES.get(sender.hostname)
    if own is not None:
        for queue in configured:
            if queue not in own:
                # This consumer only: cancel_task_queue would deselect the queue app-wide,
                # and the process's other worker would start without it.
                sender.task_consumer.cancel_by_queue(queue)
        configured = [q for q in configured if q in own]
    try:
        # Queues paused for maintenance stay paused for workers started meanwhile.
        for queue in paused_queues(settings.redis_url) & set(configured):
            sender.cancel_task_queue(queue)
            log.warning("queue %s is paused (POST /v1/ops/queues/%s/resume)", queue, queue)
    except Exception:
        log.exception("could not read the paused queues")
    started = utcnow()
    beat = Heartbeat(
        HeartbeatStore.from_settings(settings),
        lambda: describe(sender, started, configured),
        interval_s=settings.worker.heartbeat_s,
    )
    beat.start()
    _heartbeats.append(beat)
    for start in AFTER_READY.pop(sender.hostname, []):
        threading.Thread(target=start, name="celery-after-ready", daemon=True).start()


@worker_process_init.connect
def _on_child_start(**_: Any) -> None:
    # A prefork child: pooled connections inherited from the parent are not its to use.
    get_runtime().engine.dispose(close=False)
    heap.settle()


@worker_shutdown.connect
def _on_shutdown(**_: Any) -> None:
    while _heartbeats:
        _heartbeats.pop().stop()
