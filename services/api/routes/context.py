"""The context a chat backend puts in front of its model before each message."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from services.api.deps import RuntimeDep, SessionDep, SessionIdPath, TenantDep
from services.api.routing import ApiRoute
from shared.context.models import ContextPublic
from shared.flows.build_context import build_context
from shared.inputs import ID_RULE, MAX_BUDGET_TOKENS, Identifier

router = APIRouter(prefix="/v1/sessions", tags=["context"], route_class=ApiRoute)


@router.get("/{session_id}/context", response_model=ContextPublic)
def get_context(
    session_id: SessionIdPath,
    runtime: RuntimeDep,
    session: SessionDep,
    tenant_id: TenantDep,
    query: Annotated[
        str | None, Query(max_length=4000, description="default: the last user message")
    ] = None,
    budget_tokens: Annotated[int | None, Query(ge=0, le=MAX_BUDGET_TOKENS)] = None,
    user_id: Annotated[
        Identifier | None,
        Query(description=f"needed only before the session's first turn; {ID_RULE}"),
    ] = None,
) -> ContextPublic:
    return build_context(
        runtime=runtime,
        session=session,
        tenant_id=tenant_id,
        user_external_id=user_id,
        session_external_id=session_id,
        query=query,
        budget_tokens=budget_tokens,
    )
