"""A session's stored messages, read back in order."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from services.api.deps import SessionDep, SessionIdPath, TenantDep
from services.api.routing import ApiRoute
from shared.flows.read_messages import list_session_messages
from shared.inputs import MAX_OFFSET
from shared.memory.models import SessionMessagesPublic

router = APIRouter(prefix="/v1/sessions", tags=["messages"], route_class=ApiRoute)


@router.get("/{session_id}/messages", response_model=SessionMessagesPublic)
def read_messages(
    session_id: SessionIdPath,
    session: SessionDep,
    tenant_id: TenantDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    newest_first: Annotated[bool, Query(description="true: from the last message back")] = False,
) -> SessionMessagesPublic:
    return list_session_messages(
        session=session,
        tenant_id=tenant_id,
        session_external_id=session_id,
        limit=limit,
        offset=offset,
        newest_first=newest_first,
    )
