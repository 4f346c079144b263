"""mem0's hosted-API shapes under /mem0, so `MemoryClient(host=".../mem0")` works (ADR 0019)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlmodel import Session

from services.api.deps import (
    RuntimeDep,
    SessionDep,
    TasksDep,
    key_from_headers,
    principal_of,
)
from shared.db.models import ExtractionRun, User, new_id, utcnow
from shared.errors import InvalidInput, NotFound
from shared.flows.forget import delete_memory, delete_user
from shared.flows.import_transcripts import import_lines
from shared.inputs import ID_MAX_LENGTH, storable
from shared.mem0_compat.memories import (
    Mem0History,
    Mem0Hit,
    Mem0Memory,
    as_mem0,
    delete_all,
    find_memory,
    history,
    owner_of,
    run_memories,
    update_memory,
)
from shared.mem0_compat.writing import Mem0Record, write_records
from shared.memory.reader import get_memory, list_memories
from shared.memory.reader import search_memories as tiermem_search
from shared.records.ingest import TranscriptLine, find_user, validate_content
from shared.records.outbox import send_committed
from shared.vectors import point_id

router = APIRouter(prefix="/mem0", tags=["mem0"])


async def mem0_tenant(
    runtime: RuntimeDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> str:
    """mem0's clients send `Authorization: Token <key>`; Bearer and X-API-Key work too."""
    key = key_from_headers(authorization, x_api_key, schemes=("token", "bearer"))
    return (await principal_of(runtime, key)).user_tenant()


TenantDep = Annotated[str, Depends(mem0_tenant)]


class Mem0Body(BaseModel):
    # mem0's clients send options tiermem does not use (rerank, fields, …): ignored.
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        return storable(data)


class Mem0Request(Mem0Body):
    user_id: str | None = None
    agent_id: str | None = None
    app_id: str | None = None
    run_id: str | None = None
    filters: dict[str, Any] | None = None

    def owner(self) -> str:
        return owner_of({**self.model_dump(exclude={"filters"}), "filters": self.filters})


class Mem0Message(Mem0Body):
    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(min_length=1)


class AddIn(Mem0Request):
    messages: list[Mem0Message] = Field(min_length=1, max_length=1000)
    metadata: dict[str, Any] | None = None
    infer: bool = True
    timestamp: int | None = Field(default=None, description="unix seconds: when it was said")


class AddOut(BaseModel):
    message: str
    status: Literal["PENDING", "SUCCEEDED"]
    event_id: str | None = Field(description="the tiermem job: GET /mem0/v1/event/{id}/")
    results: list[dict[str, Any]] = Field(
        default_factory=list, description="infer=false: the memories written now"
    )


class SearchIn(Mem0Request):
    query: str = Field(min_length=1, max_length=4000)
    top_k: int = Field(default=10, ge=1, le=100)
    threshold: float = Field(default=0.1, ge=-1.0, le=1.0)


class SearchOut(BaseModel):
    results: list[Mem0Hit]


class Page(BaseModel):
    count: int
    next: str | None
    previous: str | None
    results: list[Mem0Memory]


class UpdateIn(Mem0Body):
    text: str | None = Field(default=None, max_length=4000)
    metadata: dict[str, Any] | None = None


class Deleted(BaseModel):
    message: str


class Ping(BaseModel):
    status: str
    org_id: str
    project_id: str
    user_email: str | None


class EventOut(BaseModel):
    id: str
    event_type: str
    status: Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED"]
    results: list[dict[str, Any]]
    created_at: dt.datetime
    updated_at: dt.datetime


def _user_or_none(session: Session, tenant_id: str, external_id: str) -> User | None:
    try:
        return find_user(session=session, tenant_id=tenant_id, user_external_id=external_id)
    except NotFound:
        return None  # mem0 answers an entity without memories with none, not 404


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
    owner = body.owner()
    said = dt.datetime.fromtimestamp(body.timestamp, dt.UTC) if body.timestamp else utcnow()
    for i, m in enumerate(body.messages):  # bad text is refused before anything is stored
        validate_content(m.content, settings=runtime.settings, where=f"messages[{i}]")
    if not body.infer:
        records = [
            Mem0Record(new_id(), m.content, owner, said, metadata=body.metadata or {})
            for m in body.messages
            if m.role != "system"
        ]
        written = write_records(
            runtime=runtime, session=session, tenant_id=tenant_id, records=records
        )
        user = find_user(session=session, tenant_id=tenant_id, user_external_id=owner)
        added = [get_memory(session=session, user=user, memory_id=i) for i in written.added]
        return AddOut(
            message="memories written",
            status="SUCCEEDED",
            event_id=None,
            results=[
                {"id": m.id, "memory": m.memory, "event": "ADD"}
                for m in as_mem0(session, added, user)
            ],
        )
    run_id = body.run_id or f"mem0-{owner}"
    session_id = run_id if len(run_id) <= ID_MAX_LENGTH else point_id("mem0", run_id)
    try:
        lines = [
            TranscriptLine.model_validate(
                {"user_id": owner, "session_id": session_id, "role": m.role,
                 "content": m.content, "created_at": said},
                strict=False,
            )
            for m in body.messages
        ]  # fmt: skip
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"messages: {where}: {first['msg']}") from exc
    summary = import_lines(
        session=session, settings=runtime.settings, tenant_id=tenant_id, lines=lines
    )
    send_committed(tasks.extract, summary.run_ids)
    return AddOut(
        message="Memory processing has been queued for background execution",
        status="PENDING",
        event_id=summary.run_ids[0] if summary.run_ids else None,
    )


@router.post("/v3/memories/search/", response_model=SearchOut)
def search(
    body: SearchIn, runtime: RuntimeDep, session: SessionDep, tenant_id: TenantDep
) -> SearchOut:
    user = _user_or_none(session, tenant_id, body.owner())
    if user is None:
        return SearchOut(results=[])
    found = tiermem_search(
        embedder=runtime.embedder,
        facts=runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id),
        session=session,
        user=user,
        query=body.query,
        k=body.top_k,
        min_score=body.threshold,
    )
    return SearchOut(
        results=[
            Mem0Hit(**Mem0Memory.of(m, user.external_id).model_dump(), score=m.score or 0.0)
            for m in found.data
        ]
    )


@router.post("/v3/memories/", response_model=Page)
def get_all(
    body: Mem0Request,
    request: Request,
    session: SessionDep,
    tenant_id: TenantDep,
    page: Annotated[int, Query(ge=1, le=10_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Page:
    user = _user_or_none(session, tenant_id, body.owner())
    if user is None:
        return Page(count=0, next=None, previous=None, results=[])
    listed = list_memories(
        session=session, user=user, limit=page_size, offset=(page - 1) * page_size
    )
    memories = [Mem0Memory.of(m, user.external_id) for m in listed.data]

    def link(to: int) -> str:
        return str(request.url.include_query_params(page=to, page_size=page_size))

    more = page * page_size < listed.count
    return Page(
        count=listed.count,
        next=link(page + 1) if more else None,
        previous=link(page - 1) if page > 1 else None,
        results=memories,
    )


@router.get("/v1/memories/{memory_id}/", response_model=Mem0Memory)
def get(memory_id: str, session: SessionDep, tenant_id: TenantDep) -> Mem0Memory:
    fact, user = find_memory(session=session, tenant_id=tenant_id, memory_id=memory_id)
    return as_mem0(session, [fact], user)[0]


@router.put("/v1/memories/{memory_id}/", response_model=Mem0Memory)
def update(
    memory_id: str, body: UpdateIn, runtime: RuntimeDep, session: SessionDep, tenant_id: TenantDep
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
    memory_id: str, runtime: RuntimeDep, session: SessionDep, tenant_id: TenantDep
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
    owner = owner_of({"user_id": user_id, "agent_id": agent_id, "app_id": app_id,
                      "run_id": run_id})  # fmt: skip
    user = _user_or_none(session, tenant_id, owner)
    count = delete_all(runtime=runtime, session=session, user=user) if user else 0
    return Deleted(message=f"Memories deleted successfully! ({count})")


@router.get("/v1/memories/{memory_id}/history/", response_model=list[Mem0History])
def memory_history(memory_id: str, session: SessionDep, tenant_id: TenantDep) -> list[Mem0History]:
    fact, user = find_memory(session=session, tenant_id=tenant_id, memory_id=memory_id)
    return history(session=session, fact=fact, user=user)


@router.delete("/v2/entities/{entity_type}/{entity_id}/", response_model=Deleted)
def delete_entity(
    entity_type: Literal["user", "agent", "app", "run"],
    entity_id: str,
    runtime: RuntimeDep,
    session: SessionDep,
    tenant_id: TenantDep,
) -> Deleted:
    """mem0's `delete_users`: the tiermem user and all of theirs, as DELETE /v1/users/{id}."""
    user = _user_or_none(session, tenant_id, owner_of({f"{entity_type}_id": entity_id}))
    if user is None:
        raise NotFound(f"{entity_type} {entity_id!r} not found")
    delete_user(runtime=runtime, session=session, user=user)
    return Deleted(message="Entity deleted successfully.")


_EVENT_STATUS: dict[str, Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED"]] = {
    "pending": "PENDING",
    "retrying": "PENDING",
    "running": "RUNNING",
    "done": "SUCCEEDED",
    "skipped": "SUCCEEDED",
    "failed": "FAILED",
}


@router.get("/v1/event/{event_id}/", response_model=EventOut)
def event(event_id: str, session: SessionDep, tenant_id: TenantDep) -> EventOut:
    """An add's extraction job, as mem0's event: its status, then the memories it wrote."""
    run = session.get(ExtractionRun, event_id)
    if run is None or run.tenant_id != tenant_id:
        raise NotFound(f"event {event_id} not found")
    user = session.get(User, run.user_id)
    if user is None:
        raise NotFound(f"event {event_id} not found")
    memories = as_mem0(session, run_memories(session=session, run=run), user)
    return EventOut(
        id=run.id,
        event_type="ADD",
        status=_EVENT_STATUS.get(run.status, "PENDING"),
        results=[{"id": m.id, "event": "ADD", "data": {"memory": m.memory}} for m in memories],
        created_at=run.created_at,
        updated_at=run.updated_at,
    )
