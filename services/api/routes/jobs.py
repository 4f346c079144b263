"""Job state: one extraction run per turn."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.deps import JobIdPath, PrincipalDep, SessionDep
from services.api.routing import ApiRoute
from shared.records.runs import JobPublic, get_job

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=ApiRoute)


@router.get("/{job_id}", response_model=JobPublic)
def read_job(job_id: JobIdPath, session: SessionDep, principal: PrincipalDep) -> JobPublic:
    return JobPublic.of(get_job(session=session, job_id=job_id, tenant_id=principal.visible_tenant))
