"""Replay (admin key): re-run extraction over stored turns; progress, cancel, resume."""

from __future__ import annotations

from fastapi import APIRouter
from sqlmodel import col, select

from services.api.deps import AdminDep, RuntimeDep, SessionDep
from shared import replay
from shared.db.models import ReplayJob
from workers.tasks.replay import start_replay

router = APIRouter(prefix="/v1/replay", tags=["replay"])


@router.post("", status_code=202, response_model=replay.ReplayProgress)
def post_replay(
    body: replay.ReplayIn, runtime: RuntimeDep, session: SessionDep, _: AdminDep
) -> replay.ReplayProgress:
    job = replay.create_job(session=session, runtime=runtime, body=body)
    start_replay(job.id)
    return replay.progress(session=session, job_id=job.id)


@router.get("", response_model=list[replay.ReplayProgress])
def list_replays(session: SessionDep, _: AdminDep) -> list[replay.ReplayProgress]:
    ids = session.exec(select(ReplayJob.id).order_by(col(ReplayJob.created_at).desc()).limit(50))
    return [replay.progress(session=session, job_id=i) for i in ids.all()]


@router.get("/{job_id}", response_model=replay.ReplayProgress)
def get_replay(job_id: str, session: SessionDep, _: AdminDep) -> replay.ReplayProgress:
    return replay.progress(session=session, job_id=job_id)


@router.post("/{job_id}/cancel", response_model=replay.ReplayProgress)
def cancel_replay(job_id: str, session: SessionDep, _: AdminDep) -> replay.ReplayProgress:
    replay.cancel(session=session, job_id=job_id)
    return replay.progress(session=session, job_id=job_id)


@router.post("/{job_id}/resume", response_model=replay.ReplayProgress)
def resume_replay(job_id: str, session: SessionDep, _: AdminDep) -> replay.ReplayProgress:
    replay.resume(session=session, job_id=job_id)
    start_replay(job_id)
    return replay.progress(session=session, job_id=job_id)
