"""Tiered compression over HTTP: tiers, compaction, runs, per-session settings, continuation."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query

from services.api.deps import (
    RunIdPath,
    RuntimeDep,
    SessionDep,
    SessionIdPath,
    TasksDep,
    TenantDep,
)
from services.api.routing import ApiRoute
from shared.compression.models import (
    CompactIn,
    CompressionRunList,
    CompressionRunPublic,
    CompressionSettingsIn,
    CompressionSettingsPublic,
    ContinueIn,
    ContinuePublic,
    TiersPublic,
)
from shared.db.models import ChatSession
from shared.flows import compact_session
from shared.inputs import MAX_OFFSET

router = APIRouter(prefix="/v1/sessions", tags=["compression"], route_class=ApiRoute)
log = logging.getLogger(__name__)


def valid_chat(session_id: SessionIdPath, tenant_id: TenantDep, session: SessionDep) -> ChatSession:
    return compact_session.find_session(
        session=session, tenant_id=tenant_id, session_external_id=session_id
    )


ChatDep = Annotated[ChatSession, Depends(valid_chat)]


@router.get("/{session_id}/tiers", response_model=TiersPublic)
def get_tiers(chat: ChatDep, runtime: RuntimeDep, session: SessionDep) -> TiersPublic:
    return compact_session.tiers_view(session=session, chat=chat, settings=runtime.settings)


@router.post("/{session_id}/compact", status_code=202, response_model=CompressionRunPublic)
def post_compact(
    chat: ChatDep,
    tasks: TasksDep,
    session: SessionDep,
    body: Annotated[CompactIn | None, Body()] = None,
) -> CompressionRunPublic:
    """Run the loop now (even below the trigger), optionally focused; poll the run."""
    return compact_session.compact_now(
        session=session, chat=chat, focus=body.focus if body else None, compress=tasks.compress
    )


@router.get("/{session_id}/compression/runs", response_model=CompressionRunList)
def get_runs(
    chat: ChatDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> CompressionRunList:
    return compact_session.list_runs(session=session, chat=chat, limit=limit, offset=offset)


@router.get("/{session_id}/compression/runs/{run_id}", response_model=CompressionRunPublic)
def get_run(chat: ChatDep, session: SessionDep, run_id: RunIdPath) -> CompressionRunPublic:
    return compact_session.get_run(session=session, chat=chat, run_id=run_id)


@router.get("/{session_id}/compression", response_model=CompressionSettingsPublic)
def get_settings_(
    chat: ChatDep, runtime: RuntimeDep, session: SessionDep
) -> CompressionSettingsPublic:
    return compact_session.session_settings(session=session, chat=chat, settings=runtime.settings)


@router.put("/{session_id}/compression", response_model=CompressionSettingsPublic)
def put_settings(
    chat: ChatDep,
    body: CompressionSettingsIn,
    tasks: TasksDep,
    runtime: RuntimeDep,
    session: SessionDep,
) -> CompressionSettingsPublic:
    """Replace the session's overrides; a lower limit takes effect without waiting for a reply."""
    return compact_session.set_session_settings(
        session=session, chat=chat, body=body, settings=runtime.settings, compress=tasks.compress
    )


@router.post("/{session_id}/continue", status_code=201, response_model=ContinuePublic)
def post_continue(
    chat: ChatDep,
    tasks: TasksDep,
    runtime: RuntimeDep,
    session: SessionDep,
    body: Annotated[ContinueIn | None, Body()] = None,
) -> ContinuePublic:
    """A child session seeded with this session's compressed context."""
    return compact_session.continue_compressed(
        session=session,
        parent=chat,
        body=body or ContinueIn(),
        settings=runtime.settings,
        compress=tasks.compress,
    )
