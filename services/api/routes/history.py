"""Searching a user's earlier messages across sessions, by keyword and meaning."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from services.api.deps import RuntimeDep, SessionDep, UserDep
from services.api.routing import ApiRoute
from shared.flows.search_history import search_user_history
from shared.inputs import ID_RULE, NON_BLANK_PATTERN, Identifier
from shared.memory.models import MAX_AROUND, MessageHitsPublic

router = APIRouter(prefix="/v1/users/{user_id}", tags=["history"], route_class=ApiRoute)


@router.get("/history/search", response_model=MessageHitsPublic)
def search(
    user: UserDep,
    session: SessionDep,
    runtime: RuntimeDep,
    q: Annotated[
        str,
        Query(
            min_length=1,
            max_length=4000,
            pattern=NON_BLANK_PATTERN,
            description="words or a question",
        ),
    ],
    k: Annotated[int, Query(ge=1, le=100)] = 10,
    exclude_session_id: Annotated[
        Identifier | None,
        Query(
            description=f"leave this session's messages out (e.g. the current one); {ID_RULE}",
        ),
    ] = None,
    around: Annotated[
        int,
        Query(ge=0, le=MAX_AROUND, description="messages shown before and after each hit"),
    ] = 0,
) -> MessageHitsPublic:
    """Messages fused from keyword (full-text) and meaning (vector) search, best first, each
    with its session, time, message id and external id, and its rank in each list."""
    return search_user_history(
        runtime=runtime,
        session=session,
        user=user,
        query=q,
        k=k,
        exclude_session_external_id=exclude_session_id,
        around=around,
    )
