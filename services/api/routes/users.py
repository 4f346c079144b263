"""A tenant's users, and each user's sessions and extraction runs: what the memory browser
(/memory) lists before it reads a user's memories."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from services.api.deps import SessionDep, TenantDep, UserDep
from services.api.routing import ApiRoute
from shared.inputs import MAX_OFFSET
from shared.records.models import SessionList, UserList
from shared.records.runs import RunStatus, UserRunList, runs_of_user
from shared.records.users import list_users, sessions_of

router = APIRouter(prefix="/v1/users", tags=["users"], route_class=ApiRoute)

Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
Statuses = Annotated[
    list[RunStatus] | None, Query(max_length=10, description="repeat to allow several")
]


@router.get("", response_model=UserList)
def read_users(
    session: SessionDep,
    tenant_id: TenantDep,
    q: Annotated[
        str | None,
        Query(max_length=128, description="only users whose id contains this, in any case"),
    ] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> UserList:
    """The users of the key's tenant, most recently active first (an app or a tenant admin
    key; the operator key reaches no user data)."""
    return list_users(
        session=session, tenant_id=tenant_id, id_contains=q, limit=limit, offset=offset
    )


@router.get("/{user_id}/sessions", response_model=SessionList)
def read_sessions(
    user: UserDep, session: SessionDep, limit: Limit = 50, offset: Offset = 0
) -> SessionList:
    return sessions_of(session=session, user=user, limit=limit, offset=offset)


@router.get("/{user_id}/runs", response_model=UserRunList)
def read_runs(
    user: UserDep,
    session: SessionDep,
    status: Statuses = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> UserRunList:
    """The user's extraction runs, newest first; failed and dropped ones are retried with
    POST /v1/ops/runs/retry (an admin key)."""
    return runs_of_user(
        session=session, user=user, statuses=status or [], limit=limit, offset=offset
    )
