"""Request dependencies: the runtime, the task queue, one DB session per request, the caller,
the loaded user."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from shared.db.models import User
from shared.inputs import ID_RULE, Identifier
from shared.records.tenancy import Principal, authenticate, hash_key, missing_key
from shared.records.users import find_user
from shared.runtime import Runtime
from workers.task_queue import TaskQueue

# Dependencies that do no I/O are `async def`: FastAPI runs sync ones in the threadpool,
# one hop each, which was a large share of a turn's CPU (bench/results/ingest.md).


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_tasks(request: Request) -> TaskQueue:
    """What the API sends to the workers (extraction, compression, replay, queue control)."""
    tasks: TaskQueue = request.app.state.tasks
    return tasks


TasksDep = Annotated[TaskQueue, Depends(get_tasks)]


# GET and HEAD are safe methods: their routes only read, so their session never queues
# behind a worker's write (SQLite's write lock); every other method's session may write.
READ_METHODS = frozenset({"GET", "HEAD"})


def get_db(request: Request, runtime: RuntimeDep) -> Iterator[Session]:
    engine = runtime.read_engine if request.method in READ_METHODS else runtime.engine
    with Session(engine, expire_on_commit=False) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_db)]


def key_from_headers(
    authorization: str | None, x_api_key: str | None, schemes: tuple[str, ...] = ("bearer",)
) -> str | None:
    """The key an `Authorization: <scheme> <key>` or `X-API-Key` header carries."""
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() in schemes and value.strip():
            return value.strip()
    return x_api_key


async def principal_of(runtime: Runtime, key: str | None) -> Principal:
    if not key:
        raise missing_key()
    digest = hash_key(key)
    cached = runtime.key_cache.get(digest)
    if cached is not None:
        return cached

    def lookup() -> Principal:
        with Session(runtime.read_engine) as session:
            return authenticate(session=session, settings=runtime.settings, key=key)

    principal = await run_in_threadpool(lookup)
    runtime.key_cache.put(digest, principal)
    return principal


async def get_principal(
    runtime: RuntimeDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> Principal:
    return await principal_of(runtime, key_from_headers(authorization, x_api_key))


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_tenant_id(principal: PrincipalDep) -> str:
    return principal.user_tenant()


TenantDep = Annotated[str, Depends(get_tenant_id)]


async def require_admin(principal: PrincipalDep) -> Principal:
    principal.require_admin()
    return principal


async def require_operator(principal: PrincipalDep) -> Principal:
    principal.require_operator()
    return principal


# A tenant admin or the operator; the route narrows to a tenant with principal.reach_tenant.
AdminDep = Annotated[Principal, Depends(require_admin)]
OperatorDep = Annotated[Principal, Depends(require_operator)]

# Ids in paths and queries follow the same rule as in bodies (shared.inputs.Identifier),
# also the ids tiermem made: checked before any query, the database never sees text it
# cannot hold (PostgreSQL refuses a NUL with an error of its own, a 500 without this).
UserIdPath = Annotated[Identifier, Path(description=f"the user's id in your system; {ID_RULE}")]
SessionIdPath = Annotated[
    Identifier, Path(description=f"the session's id in your system; {ID_RULE}")
]
JobIdPath = Annotated[Identifier, Path(description=f"a job's id, as an answer gave it; {ID_RULE}")]
MemoryIdPath = Annotated[
    Identifier, Path(description=f"a memory's id, from a list or a search; {ID_RULE}")
]
RunIdPath = Annotated[
    Identifier, Path(description=f"a compression run's id, as an answer gave it; {ID_RULE}")
]
TenantIdPath = Annotated[Identifier, Path(description=f"the tenant's id; {ID_RULE}")]


def valid_user(user_id: UserIdPath, tenant_id: TenantDep, session: SessionDep) -> User:
    return find_user(session=session, tenant_id=tenant_id, user_external_id=user_id)


UserDep = Annotated[User, Depends(valid_user)]
