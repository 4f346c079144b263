"""Replay jobs as stored and shown: the request (ReplayIn), progress and ETA, cancel and resume,
the dispatcher's next batch, and the job's end. SQL only; the replay itself (opening the runs,
each user's dry-run diff or rebuild) is shared/flows/replay_extraction.py."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator
from sqlalchemy import func, update
from sqlmodel import Session, col, select

from shared.db.models import (
    ExtractionRun,
    ReplayJob,
    utcnow,
)
from shared.errors import Conflict, NotFound
from shared.inputs import Identifier, RequestModel, Timestamp
from shared.records.runs import OPEN

Mode = Literal["dry_run", "apply", "rebuild"]


class ReplayIn(RequestModel):
    """POST /v1/replay: which turns, and what to do with their new extraction."""

    mode: Mode
    tenant_id: str | None = Field(default=None, description="only this tenant (admin: any)")
    user_ids: list[Identifier] | None = Field(
        default=None, max_length=10_000, description="users' external ids (needs tenant_id)"
    )
    session_ids: list[Identifier] | None = Field(
        default=None, max_length=10_000, description="sessions' external ids (needs tenant_id)"
    )
    since: Timestamp | None = Field(default=None, description="turns said at or after")
    until: Timestamp | None = Field(
        default=None, description="turns said before (later than `since`)"
    )
    stale_only: bool = Field(
        default=False,
        description=(
            "only turns whose last extraction used another extractor version, or kept none of "
            "what it extracted (failed or dropped)"
        ),
    )

    @model_validator(mode="after")
    def _scoped(self) -> ReplayIn:
        if self.since and self.until and self.since >= self.until:
            raise ValueError("since must be before until")
        return self


class ReplayProgress(BaseModel):
    id: str
    mode: str
    status: str  # running | cancelled | done
    selection: dict[str, Any]
    extractor: str
    extractor_version: str
    total: int
    done: int  # finished: written, diffed or swapped in
    staged: int  # extracted, waiting for the rest of their user's turns
    pending: int
    running: int
    failed: int
    rate_per_s: float  # over the last minute
    eta_s: float | None
    errors: list[dict[str, Any]]
    report: dict[str, Any]
    created_at: dt.datetime
    finished_at: dt.datetime | None


def get_job(session: Session, job_id: str, tenant_id: str | None = None) -> ReplayJob:
    """`tenant_id`: only a replay of that tenant is found (None: any replay)."""
    job = session.get(ReplayJob, job_id)
    if job is None or (tenant_id is not None and job.tenant_id != tenant_id):
        raise NotFound(f"replay job {job_id} not found")
    return job


def list_jobs(*, session: Session, tenant_id: str | None, limit: int = 50) -> list[ReplayProgress]:
    """The newest replays (of `tenant_id`; None: all)."""
    query = select(ReplayJob.id).order_by(col(ReplayJob.created_at).desc()).limit(limit)
    if tenant_id is not None:
        query = query.where(ReplayJob.tenant_id == tenant_id)
    return [progress(session=session, job_id=i) for i in session.exec(query).all()]


def progress(
    *,
    session: Session,
    job_id: str,
    tenant_id: str | None = None,
    now: dt.datetime | None = None,
) -> ReplayProgress:
    job = get_job(session, job_id, tenant_id)
    now = now or utcnow()
    runs = col(ExtractionRun.replay_job_id) == job_id
    counts: dict[str, int] = dict(
        session.exec(
            select(ExtractionRun.status, func.count()).where(runs).group_by(ExtractionRun.status)
        ).all()
    )
    recent = session.exec(
        select(func.count()).where(
            runs,
            col(ExtractionRun.finished_at) >= now - dt.timedelta(minutes=1),
            col(ExtractionRun.status) != "failed",
        )
    ).one()
    errors = session.exec(
        select(ExtractionRun.id, ExtractionRun.error, ExtractionRun.attempts)
        .where(runs, col(ExtractionRun.status) == "failed")
        .order_by(col(ExtractionRun.finished_at).desc())
        .limit(20)
    ).all()
    done = counts.get("done", 0) + counts.get("skipped", 0)
    open_ = sum(counts.get(s, 0) for s in OPEN)
    rate = round(int(recent) / 60.0, 2)
    return ReplayProgress(
        id=job.id, mode=job.mode, status=job.status, selection=job.selection,
        extractor=job.extractor, extractor_version=job.extractor_version, total=job.total,
        done=done, staged=counts.get("staged", 0), pending=counts.get("pending", 0),
        running=counts.get("running", 0) + counts.get("retrying", 0),
        failed=counts.get("failed", 0), rate_per_s=rate,
        eta_s=round((open_ + counts.get("staged", 0)) / rate, 1) if rate > 0 and open_ else None,
        errors=[{"run_id": e[0], "error": e[1], "attempts": e[2]} for e in errors],
        report=job.report, created_at=job.created_at, finished_at=job.finished_at,
    )  # fmt: skip


def cancel(*, session: Session, job_id: str, tenant_id: str | None = None) -> ReplayJob:
    """Workers stop taking its turns; what is pending stays pending for a resume."""
    job = get_job(session, job_id, tenant_id)
    if job.status == "done":
        raise Conflict(f"replay job {job_id} is done already")
    job.status = "cancelled"
    job.updated_at = utcnow()
    session.add(job)
    session.commit()
    return job


def resume(*, session: Session, job_id: str, tenant_id: str | None = None) -> ReplayJob:
    """Running again: turns a crashed worker left running go back to pending, and every
    pending turn is sent again by the dispatcher (a turn that finishes twice changes
    nothing the second time)."""
    job = get_job(session, job_id, tenant_id)
    if job.status == "done":
        raise Conflict(f"replay job {job_id} is done already")
    now = utcnow()
    session.execute(
        update(ExtractionRun)
        .where(
            col(ExtractionRun.replay_job_id) == job_id,
            col(ExtractionRun.status).in_(OPEN),
        )
        .values(status="pending", enqueued_at=None, updated_at=now)
    )
    job.status = "running"
    job.updated_at = now
    session.add(job)
    session.commit()
    return job


def next_batch(*, session: Session, job_id: str, limit: int) -> tuple[list[str], int]:
    """Up to `limit` of the job's runs not sent yet, marked sent (committed); and how many
    unsent remain after them."""
    unsent = (
        col(ExtractionRun.replay_job_id) == job_id,
        col(ExtractionRun.status) == "pending",
        col(ExtractionRun.enqueued_at).is_(None),
    )
    ids = list(
        session.exec(
            select(ExtractionRun.id)
            .where(*unsent)
            .order_by(col(ExtractionRun.created_at))
            .limit(limit)
        ).all()
    )
    if ids:
        session.execute(
            update(ExtractionRun).where(col(ExtractionRun.id).in_(ids)).values(enqueued_at=utcnow())
        )
    remaining = session.exec(select(func.count()).where(*unsent)).one()
    session.commit()
    return ids, int(remaining)


def job_status(session: Session, job_id: str) -> str | None:
    job = session.get(ReplayJob, job_id)
    return job.status if job else None


def finish_job_if_done(*, session: Session, job_id: str) -> bool:
    job = session.get(ReplayJob, job_id)
    if job is None or job.status != "running":
        return False
    unfinished = session.exec(
        select(func.count()).where(
            col(ExtractionRun.replay_job_id) == job_id,
            col(ExtractionRun.status).in_((*OPEN, "staged")),
        )
    ).one()
    if unfinished:
        return False
    now = utcnow()
    updated = session.execute(
        update(ReplayJob)
        .where(col(ReplayJob.id) == job_id, col(ReplayJob.status) == "running")
        .values(status="done", finished_at=now, updated_at=now)
    )
    session.commit()
    return bool(updated.rowcount)  # type: ignore[attr-defined]
