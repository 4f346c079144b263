"""Turn ingestion: store first, answer 202, extract in a worker."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Body, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from services.api.deps import RuntimeDep, SessionDep, TenantDep
from shared.ingest import ID_RULE, TranscriptLine, TurnIn, ingest_messages, turn_messages
from shared.runtime import Runtime
from shared.transcripts import import_lines

router = APIRouter(prefix="/v1", tags=["turns"])
log = logging.getLogger(__name__)

SessionIdPath = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}$", description=ID_RULE)
]


class TurnAccepted(BaseModel):
    session_id: str
    user_id: str
    message_ids: list[str]
    job_id: str | None  # None when the turn had no user message to extract from
    status: str
    extractor: str
    duplicate: bool = False


class ImportIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[TranscriptLine] = Field(min_length=1, max_length=1000)


class ImportAccepted(BaseModel):
    stored: int
    duplicates: int
    job_ids: list[str]


def enqueue(request: Request, run_ids: list[str]) -> None:
    """After the commit. A broker outage is not the client's problem: the runs are pending
    in SQL and the outbox sweeper sends them when the broker is back."""
    if not run_ids:
        return
    try:
        request.app.state.enqueue(run_ids)
    except Exception:
        log.warning(
            "enqueue failed; the outbox sweeper will resend %d runs", len(run_ids), exc_info=True
        )


@router.post("/sessions/{session_id}/turns", status_code=202, response_model=TurnAccepted)
async def post_turn(
    session_id: SessionIdPath,
    turn: Annotated[TurnIn, Body()],
    request: Request,
    runtime: RuntimeDep,
    tenant_id: TenantDep,
) -> TurnAccepted:
    # The hottest route: its blocking work (SQL, then the broker) takes one threadpool hop.
    return await run_in_threadpool(store_turn, request, runtime, tenant_id, session_id, turn)


def store_turn(
    request: Request, runtime: Runtime, tenant_id: str, session_id: str, turn: TurnIn
) -> TurnAccepted:
    with Session(runtime.engine, expire_on_commit=False) as session:
        result = ingest_messages(
            session=session,
            settings=runtime.settings,
            tenant_id=tenant_id,
            user_external_id=turn.user_id,
            session_external_id=session_id,
            messages=turn_messages(turn),
            extractor=runtime.settings.extractor_kind,
        )
        session.commit()
    enqueue(request, [r.id for r in result.runs])
    runs = result.runs or result.existing_runs
    run = runs[0] if runs else None
    return TurnAccepted(
        session_id=session_id,
        user_id=turn.user_id,
        message_ids=[m.id for m in result.messages],
        job_id=run.id if run else None,
        status=run.status if run else "stored",
        extractor=run.extractor if run else runtime.settings.extractor_kind,
        duplicate=not result.runs and result.duplicates > 0,
    )


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
