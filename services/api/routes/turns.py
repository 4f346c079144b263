"""Turn ingestion: store first, answer 202, extract in a worker."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request

from services.api.deps import RuntimeDep, SessionDep, SessionIdPath, TenantDep
from shared.ingest import (
    ImportAccepted,
    ImportIn,
    IngestRequest,
    TurnAccepted,
    TurnIn,
    check_messages,
    turn_messages,
)
from shared.outbox import send_committed
from shared.transcripts import import_lines

router = APIRouter(prefix="/v1", tags=["turns"])


def enqueue(request: Request, run_ids: list[str]) -> None:
    send_committed(request.app.state.enqueue, run_ids)


@router.post("/sessions/{session_id}/turns", status_code=202, response_model=TurnAccepted)
async def post_turn(
    session_id: SessionIdPath,
    turn: Annotated[TurnIn, Body()],
    request: Request,
    runtime: RuntimeDep,
    tenant_id: TenantDep,
) -> TurnAccepted:
    # The hottest route: no threadpool hop; the process's turn writer commits the turns
    # that arrive together in one transaction (shared.turn_writer) and enqueues their runs.
    messages = turn_messages(turn)
    check_messages(messages, settings=runtime.settings)  # bad input never joins a batch
    extractor = runtime.settings.extractor_kind
    ingest_request = IngestRequest(
        tenant_id=tenant_id,
        user_external_id=turn.user_id,
        session_external_id=session_id,
        messages=messages,
        extractor=extractor,
    )
    result = await request.app.state.turn_writer.store(ingest_request)
    return TurnAccepted.of(session_id, turn.user_id, result, extractor)


@router.post("/import", status_code=202, response_model=ImportAccepted)
def post_import(
    body: ImportIn,
    request: Request,
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
    enqueue(request, summary.run_ids)
    return ImportAccepted(
        stored=summary.stored, duplicates=summary.duplicates, job_ids=summary.run_ids
    )
