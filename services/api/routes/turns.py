"""Turn ingestion: store first, answer 202, extract in a worker."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request

from services.api.deps import RuntimeDep, SessionDep, SessionIdPath, TasksDep, TenantDep
from services.api.routing import ApiRoute
from shared.flows.import_transcripts import import_lines
from shared.flows.store_turn import TurnWriter
from shared.records.models import ImportAccepted, ImportIn, TurnAccepted, TurnIn

router = APIRouter(prefix="/v1", tags=["turns"], route_class=ApiRoute)


@router.post("/sessions/{session_id}/turns", status_code=202, response_model=TurnAccepted)
async def post_turn(
    session_id: SessionIdPath,
    turn: Annotated[TurnIn, Body()],
    request: Request,
    tenant_id: TenantDep,
) -> TurnAccepted:
    # The hottest route: no threadpool hop; the process's turn writer commits the turns
    # that arrive together in one transaction (shared.flows.store_turn) and enqueues their runs.
    writer: TurnWriter = request.app.state.turn_writer
    return await writer.store_turn(turn, tenant_id=tenant_id, session_external_id=session_id)


@router.post("/import", status_code=202, response_model=ImportAccepted)
def post_import(
    body: ImportIn,
    tasks: TasksDep,
    runtime: RuntimeDep,
    session: SessionDep,
    tenant_id: TenantDep,
) -> ImportAccepted:
    """A batch of transcript lines (≤1000): the same path as `tiermem import FILE.jsonl`."""
    summary = import_lines(
        session=session,
        settings=runtime.settings,
        tenant_id=tenant_id,
        lines=body.messages,
    )
    tasks.extract(summary.run_ids)
    return ImportAccepted(
        stored=summary.stored, duplicates=summary.duplicates, job_ids=summary.run_ids
    )
