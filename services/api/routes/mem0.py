"""mem0's hosted-API shapes under /mem0, so `MemoryClient(host=".../mem0")` works (ADR 0019).

Each route parses the request and calls one function of shared.mem0_compat (`hosted`,
`memories`); the shapes are in shared.mem0_compat.models.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request

from services.api.deps import (
    JobIdPath,
    MemoryIdPath,
    RuntimeDep,
    SessionDep,
    TasksDep,
    key_from_headers,
    principal_of,
)
from services.api.routing import ApiRoute
from shared.flows.forget import delete_memory
from shared.inputs import ID_RULE, Identifier
from shared.mem0_compat import hosted, models
from shared.mem0_compat.memories import (
    Mem0History,
    Mem0Memory,
    as_mem0,
    find_memory,
    history,
    update_memory,
)
from shared.mem0_compat.models import (
    AddIn,
    AddOut,
    Deleted,
    EventOut,
    Mem0Request,
    Page,
    Ping,
    SearchOut,
    UpdateIn,
)

router = APIRouter(prefix="/mem0", tags=["mem0"], route_class=ApiRoute)


async def mem0_tenant(
    runtime: RuntimeDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> str:
    """mem0's clients send `Authorization: Token <key>`; Bearer and X-API-Key work too."""
    key = key_from_headers(authorization, x_api_key, schemes=("token", "bearer"))
    return (await principal_of(runtime, key)).user_tenant()


TenantDep = Annotated[str, Depends(mem0_tenant)]


# shared.memory.models has a SearchIn too, so /openapi.json names both schemas by their module;
# declared here, mem0's keeps its published name (services__api__routes__mem0__SearchIn).
class SearchIn(models.SearchIn):
    pass


@router.get("/v1/ping/", response_model=Ping)
def ping(tenant_id: TenantDep) -> Ping:
    """What `MemoryClient.__init__` calls to check its key."""
    return Ping(status="ok", org_id=tenant_id, project_id=tenant_id, user_email=None)


@router.post("/v3/memories/add/", response_model=AddOut)
def add(
    body: AddIn,
    tasks: TasksDep,
    runtime: RuntimeDep,
    session: SessionDep,
    tenant_id: TenantDep,
) -> AddOut:
    """infer=true (mem0's default): the messages are stored as turns and extracted by the
    worker, as `POST /v1/import`; mem0's async answer (PENDING with an event id). infer=false:
    each message becomes typed memories now (shared.mem0_compat.writing)."""
    return hosted.add_messages(
        runtime=runtime, session=session, tenant_id=tenant_id, body=body, enqueue=tasks.extract
    )


@router.post("/v3/memories/search/", response_model=SearchOut)
def search(
    body: SearchIn, runtime: RuntimeDep, session: SessionDep, tenant_id: TenantDep
) -> SearchOut:
    return hosted.search(runtime=runtime, session=session, tenant_id=tenant_id, body=body)


@router.post("/v3/memories/", response_model=Page)
def get_all(
    body: Mem0Request,
    request: Request,
    session: SessionDep,
    tenant_id: TenantDep,
    page: Annotated[int, Query(ge=1, le=10_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Page:
    def link(to: int) -> str:
        return str(request.url.include_query_params(page=to, page_size=page_size))

    return hosted.page_of(
        session=session, tenant_id=tenant_id, body=body, page=page, page_size=page_size, link=link
    )


@router.get("/v1/memories/{memory_id}/", response_model=Mem0Memory)
def get(memory_id: MemoryIdPath, session: SessionDep, tenant_id: TenantDep) -> Mem0Memory:
    fact, user = find_memory(session=session, tenant_id=tenant_id, memory_id=memory_id)
    return as_mem0(session, [fact], user)[0]


@router.put("/v1/memories/{memory_id}/", response_model=Mem0Memory)
def update(
    memory_id: MemoryIdPath,
    body: UpdateIn,
    runtime: RuntimeDep,
    session: SessionDep,
    tenant_id: TenantDep,
) -> Mem0Memory:
    """The memory keeps its id and takes the new text; the old text stays as the version it
    superseded (see `history`)."""
    fact, user = find_memory(session=session, tenant_id=tenant_id, memory_id=memory_id)
    updated = update_memory(
        runtime=runtime, session=session, fact=fact, user=user, text=body.text,
        metadata=body.metadata,
    )  # fmt: skip
    return as_mem0(session, [updated], user)[0]


@router.delete("/v1/memories/{memory_id}/", response_model=Deleted)
def delete(
    memory_id: MemoryIdPath, runtime: RuntimeDep, session: SessionDep, tenant_id: TenantDep
) -> Deleted:
    fact, user = find_memory(session=session, tenant_id=tenant_id, memory_id=memory_id)
    delete_memory(runtime=runtime, session=session, user=user, memory_id=fact.id)
    return Deleted(message="Memory deleted successfully!")


@router.delete("/v1/memories/", response_model=Deleted)
def remove_all(
    runtime: RuntimeDep,
    session: SessionDep,
    tenant_id: TenantDep,
    user_id: str | None = None,
    agent_id: str | None = None,
    app_id: str | None = None,
    run_id: str | None = None,
) -> Deleted:
    """The entity's memories; its stored messages stay (DELETE /v1/users/{id} erases all)."""
    entity_ids = {"user_id": user_id, "agent_id": agent_id, "app_id": app_id, "run_id": run_id}
    return hosted.remove_all(
        runtime=runtime, session=session, tenant_id=tenant_id, entity_ids=entity_ids
    )


@router.get("/v1/memories/{memory_id}/history/", response_model=list[Mem0History])
def memory_history(
    memory_id: MemoryIdPath, session: SessionDep, tenant_id: TenantDep
) -> list[Mem0History]:
    fact, user = find_memory(session=session, tenant_id=tenant_id, memory_id=memory_id)
    return history(session=session, fact=fact, user=user)


@router.delete("/v2/entities/{entity_type}/{entity_id}/", response_model=Deleted)
def delete_entity(
    entity_type: Literal["user", "agent", "app", "run"],
    entity_id: Annotated[Identifier, Path(description=f"the entity's id; {ID_RULE}")],
    runtime: RuntimeDep,
    session: SessionDep,
    tenant_id: TenantDep,
) -> Deleted:
    """mem0's `delete_users`: the tiermem user and all of theirs, as DELETE /v1/users/{id}."""
    return hosted.remove_entity(
        runtime=runtime, session=session, tenant_id=tenant_id, entity_type=entity_type,
        entity_id=entity_id,
    )  # fmt: skip


@router.get("/v1/event/{event_id}/", response_model=EventOut)
def event(event_id: JobIdPath, session: SessionDep, tenant_id: TenantDep) -> EventOut:
    """An add's extraction job, as mem0's event: its status, then the memories it wrote."""
    return hosted.event(session=session, tenant_id=tenant_id, event_id=event_id)
