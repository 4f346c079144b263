"""Operator actions: retry failed runs, pause and resume a queue."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field
from sqlalchemy import update
from sqlmodel import Session, col, select

from shared.db.models import ExtractionRun, Message, utcnow
from shared.errors import Conflict, InvalidInput
from shared.inputs import RequestModel
from shared.ops.broker import PAUSED_KEY
from shared.ops.queue_names import QUEUES
from shared.ops.workers import redis_client
from shared.records.runs import RETRYABLE

MAX_RETRY_BATCH = 10_000


class RetryIn(RequestModel):
    run_ids: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_RETRY_BATCH,
        description="the failed runs to retry; leave out to retry every failed run",
    )
    tenant_id: str | None = Field(default=None, description="only this tenant's runs")


class RetryOut(BaseModel):
    retried: list[str]
    skipped: list[str] = Field(description="named runs that are not failed (or not found)")


class QueueState(BaseModel):
    queue: str
    paused: bool


def retry_failed_runs(
    *,
    session: Session,
    run_ids: Sequence[str] | None = None,
    tenant_id: str | None = None,
    limit: int = MAX_RETRY_BATCH,
) -> tuple[list[str], list[str]]:
    """Put failed and dropped extraction runs back to pending (committed); the caller
    enqueues them.

    `run_ids` names runs one by one; without it every failed or dropped run (of `tenant_id`,
    if given) up to `limit`, oldest first. Returns (retried, skipped: not found or neither).
    """
    query = select(ExtractionRun.id).where(col(ExtractionRun.status).in_(RETRYABLE))
    if run_ids is not None:
        if not run_ids:
            raise InvalidInput("run_ids is empty: name the runs, or leave it out to retry all")
        query = query.where(col(ExtractionRun.id).in_(list(run_ids)))
    if tenant_id is not None:
        query = query.where(ExtractionRun.tenant_id == tenant_id)
    ids = list(session.exec(query.order_by(col(ExtractionRun.created_at)).limit(limit)).all())
    skipped = [r for r in run_ids or [] if r not in set(ids)]
    if ids:
        now = utcnow()
        session.execute(
            update(ExtractionRun)
            .where(col(ExtractionRun.id).in_(ids), col(ExtractionRun.status).in_(RETRYABLE))
            .values(status="pending", error=None, enqueued_at=now, finished_at=None, updated_at=now)
        )
        session.execute(
            update(Message).where(col(Message.run_id).in_(ids)).values(extraction_status="pending")
        )
        session.commit()
    return ids, skipped


def check_queue(queue: str) -> str:
    if queue not in QUEUES:
        raise InvalidInput(f"unknown queue {queue!r}: use one of {', '.join(QUEUES)}")
    return queue


def paused_queues(redis_url: str | None) -> set[str]:
    if not redis_url:
        return set()
    with redis_client(redis_url) as client:
        return {m.decode() if isinstance(m, bytes) else str(m) for m in client.smembers(PAUSED_KEY)}


def set_paused(redis_url: str | None, queue: str, paused: bool) -> None:
    """Record the state every worker (and every worker started later) follows."""
    if not redis_url:
        raise Conflict(
            "pausing a queue needs the Redis broker (TIERMEM_REDIS_URL); the in-process "
            "worker of `tiermem serve` stops with the server"
        )
    with redis_client(redis_url) as client:
        if paused:
            client.sadd(PAUSED_KEY, check_queue(queue))
        else:
            client.srem(PAUSED_KEY, check_queue(queue))
