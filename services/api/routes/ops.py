"""Ops: queues and failed runs (a tenant admin sees its own rows), workers, pausing a queue and
/metrics (the operator only), the /ops page."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, PlainTextResponse

from services.api.deps import AdminDep, OperatorDep, RuntimeDep, SessionDep, TasksDep
from services.api.routing import ApiRoute
from shared.errors import Unavailable
from shared.ops import control, page, prometheus, timeseries
from shared.ops.control import QueueState, RetryIn, RetryOut
from shared.ops.models import OpsSnapshot
from shared.ops.queues import snapshot
from shared.ops.vectors import VectorStats, recent_vector_stats, vector_stats
from shared.ops.workers import HeartbeatStore, WorkerInfo
from shared.vectors import VectorStore
from shared.webhooks.models import WebhookOps
from shared.webhooks.status import webhook_ops

router = APIRouter(tags=["ops"], route_class=ApiRoute)


@router.get("/v1/ops/queues", response_model=OpsSnapshot)
def get_queues(
    runtime: RuntimeDep,
    session: SessionDep,
    principal: AdminDep,
    failed_limit: Annotated[int, Query(ge=0, le=500)] = 20,
) -> OpsSnapshot:
    return snapshot(
        session=session,
        settings=runtime.settings,
        failed_limit=failed_limit,
        tenant_id=principal.visible_tenant,
    )


@router.get("/v1/ops/webhooks", response_model=WebhookOps)
def get_webhooks_ops(
    session: SessionDep,
    principal: AdminDep,
    failed_limit: Annotated[int, Query(ge=0, le=500)] = 20,
) -> WebhookOps:
    """Each webhook's state and last error, deliveries owed, the failing ones (ADR 0027)."""
    return webhook_ops(
        session=session, tenant_id=principal.visible_tenant, failing_limit=failed_limit
    )


@router.get("/v1/ops/workers", response_model=list[WorkerInfo])
def get_workers(runtime: RuntimeDep, _: OperatorDep) -> list[WorkerInfo]:
    return HeartbeatStore.from_settings(runtime.settings).read()


@router.get("/v1/ops/timeseries", response_model=timeseries.Series)
def get_timeseries(
    session: SessionDep,
    principal: AdminDep,
    minutes: Annotated[int, Query(ge=1, le=24 * 60)] = 60,
) -> timeseries.Series:
    return timeseries.per_minute(
        session=session, minutes=minutes, tenant_id=principal.visible_tenant
    )


@router.get("/v1/ops/vectors", response_model=VectorStats)
def get_vectors(runtime: RuntimeDep, _: OperatorDep) -> VectorStats:
    """The vector store: engine, layout, collections, points, disk (every tenant's)."""
    return vector_stats(settings=runtime.settings, store=runtime.vectors)


@router.post("/v1/ops/runs/retry", response_model=RetryOut)
def post_retry(
    body: RetryIn, tasks: TasksDep, session: SessionDep, principal: AdminDep
) -> RetryOut:
    retried, skipped = control.retry_failed_runs(
        session=session, run_ids=body.run_ids, tenant_id=principal.reach_tenant(body.tenant_id)
    )
    tasks.extract(retried)
    return RetryOut(retried=retried, skipped=skipped)


@router.post("/v1/ops/queues/{queue}/pause", response_model=QueueState)
def post_pause(queue: str, tasks: TasksDep, _: OperatorDep) -> QueueState:
    tasks.pause(queue)
    return QueueState(queue=queue, paused=True)


@router.post("/v1/ops/queues/{queue}/resume", response_model=QueueState)
def post_resume(queue: str, tasks: TasksDep, _: OperatorDep) -> QueueState:
    tasks.resume(queue)
    return QueueState(queue=queue, paused=False)


# Errors answer JSON like every route; only the metrics themselves are text.
METRICS_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Prometheus text exposition format",
        "content": {prometheus.CONTENT_TYPE: {"schema": {"type": "string"}}},
    }
}


@router.get("/metrics", response_model=None, responses=METRICS_DOC)
def get_metrics(runtime: RuntimeDep, session: SessionDep, _: OperatorDep) -> PlainTextResponse:
    try:
        store: VectorStore | None = runtime.vectors
    except Unavailable:  # a worker owns the embedded folder: what its files tell, not a 503
        store = None
    vectors = recent_vector_stats(settings=runtime.settings, store=store)
    return PlainTextResponse(
        prometheus.render(session=session, settings=runtime.settings, vectors=vectors),
        media_type=prometheus.CONTENT_TYPE,
    )


@router.get("/ops", response_class=HTMLResponse, include_in_schema=False)
def get_ops_page() -> HTMLResponse:
    # The page is a shell with no data: it asks for the admin key and reads the API with it.
    return HTMLResponse(page.HTML)
