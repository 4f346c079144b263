"""A user's memories: list, search, read, delete, their beliefs over time; the user's export
and erasure."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from services.api.deps import MemoryIdPath, RuntimeDep, SessionDep, UserDep
from services.api.routing import ApiRoute
from shared.extraction.schemas import FactType
from shared.flows.forget import delete_memory, delete_user
from shared.flows.read_memories import (
    belief_timeline,
    export_user,
    list_memories,
    memory_by_id,
)
from shared.flows.search_memories import search_memories
from shared.inputs import MAX_OFFSET
from shared.memory.models import (
    BeliefTimeline,
    MemoriesPublic,
    MemoryPublic,
    SearchIn,
    UserDeleted,
    UserExport,
)

router = APIRouter(prefix="/v1/users/{user_id}", tags=["memories"], route_class=ApiRoute)


@router.get("/memories", response_model=MemoriesPublic)
def read_memories(
    user: UserDep,
    session: SessionDep,
    type: Annotated[list[FactType] | None, Query(description="repeat to allow several")] = None,
    include_superseded: bool = False,
    quarantined: Annotated[
        bool | None, Query(description="true: only facts held back by the injection guard")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> MemoriesPublic:
    return list_memories(
        session=session,
        user=user,
        types=type or [],
        include_superseded=include_superseded,
        quarantined=quarantined,
        limit=limit,
        offset=offset,
    )


@router.post("/memories/search", response_model=MemoriesPublic)
def search(
    body: SearchIn, user: UserDep, session: SessionDep, runtime: RuntimeDep
) -> MemoriesPublic:
    return search_memories(
        runtime=runtime,
        session=session,
        user=user,
        query=body.query,
        k=body.k,
        types=body.types,
        min_score=body.min_score,
    )


@router.get("/beliefs", response_model=BeliefTimeline)
def read_beliefs(user: UserDep, session: SessionDep) -> BeliefTimeline:
    """Per slot (employer, location, a pet, a liked thing), every value it held, oldest first:
    when each began and ended, and the fact and message that superseded or ended it."""
    return belief_timeline(session=session, user=user)


@router.get("/memories/{memory_id}", response_model=MemoryPublic)
def read_memory(memory_id: MemoryIdPath, user: UserDep, session: SessionDep) -> MemoryPublic:
    return memory_by_id(session=session, user=user, memory_id=memory_id)


@router.delete("/memories/{memory_id}", status_code=204)
def remove_memory(
    memory_id: MemoryIdPath, user: UserDep, session: SessionDep, runtime: RuntimeDep
) -> Response:
    delete_memory(runtime=runtime, session=session, user=user, memory_id=memory_id)
    return Response(status_code=204)


@router.delete("", response_model=UserDeleted)
def remove_user(user: UserDep, session: SessionDep, runtime: RuntimeDep) -> UserDeleted:
    return delete_user(runtime=runtime, session=session, user=user)


@router.get("/export", response_model=UserExport)
def export(user: UserDep, session: SessionDep) -> UserExport:
    return export_user(session=session, user=user)
