"""Replay (admin keys): re-run extraction over stored turns; progress, cancel, resume.

The operator replays any tenant; a tenant admin only its own (its replays over no tenant
named are its tenant's, and it never sees another tenant's replay).
"""

from __future__ import annotations

from fastapi import APIRouter

from services.api.deps import AdminDep, JobIdPath, RuntimeDep, SessionDep, TasksDep
from services.api.routing import ApiRoute
from shared.errors import Unavailable
from shared.flows.replay_extraction import create_job
from shared.records import replay

router = APIRouter(prefix="/v1/replay", tags=["replay"], route_class=ApiRoute)


@router.post("", status_code=202, response_model=replay.ReplayProgress)
def post_replay(
    body: replay.ReplayIn,
    runtime: RuntimeDep,
    tasks: TasksDep,
    session: SessionDep,
    principal: AdminDep,
) -> replay.ReplayProgress:
    scoped = body.model_copy(update={"tenant_id": principal.reach_tenant(body.tenant_id)})
    job = create_job(session=session, runtime=runtime, body=scoped)
    if not tasks.replay(job.id):
        raise _unreachable(job.id)
    return replay.progress(session=session, job_id=job.id)


@router.get("", response_model=list[replay.ReplayProgress])
def list_replays(session: SessionDep, principal: AdminDep) -> list[replay.ReplayProgress]:
    return replay.list_jobs(session=session, tenant_id=principal.visible_tenant)


@router.get("/{job_id}", response_model=replay.ReplayProgress)
def get_replay(
    job_id: JobIdPath, session: SessionDep, principal: AdminDep
) -> replay.ReplayProgress:
    return replay.progress(session=session, job_id=job_id, tenant_id=principal.visible_tenant)


@router.post("/{job_id}/cancel", response_model=replay.ReplayProgress)
def cancel_replay(
    job_id: JobIdPath, session: SessionDep, principal: AdminDep
) -> replay.ReplayProgress:
    replay.cancel(session=session, job_id=job_id, tenant_id=principal.visible_tenant)
    return replay.progress(session=session, job_id=job_id)


@router.post("/{job_id}/resume", response_model=replay.ReplayProgress)
def resume_replay(
    job_id: JobIdPath, tasks: TasksDep, session: SessionDep, principal: AdminDep
) -> replay.ReplayProgress:
    replay.resume(session=session, job_id=job_id, tenant_id=principal.visible_tenant)
    if not tasks.replay(job_id):
        raise _unreachable(job_id)
    return replay.progress(session=session, job_id=job_id)


def _unreachable(job_id: str) -> Unavailable:
    return Unavailable(
        f"the replay queue is unreachable: job {job_id} is stored with its turns pending; "
        f"POST /v1/replay/{job_id}/resume sends them once the broker is back",
        details={"job_id": job_id},
    )
