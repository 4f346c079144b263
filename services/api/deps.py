"""Request dependencies: the runtime, one DB session per request, the caller, the loaded user."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from sqlmodel import Session

from shared.db.models import User
from shared.errors import Forbidden
from shared.ingest import ID_RULE, find_user
from shared.runtime import Runtime
from shared.tenancy import Principal, authenticate


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_db(runtime: RuntimeDep) -> Iterator[Session]:
    with Session(runtime.engine, expire_on_commit=False) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_db)]


def get_principal(
    runtime: RuntimeDep,
    session: SessionDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> Principal:
    key = x_api_key
    if authorization and authorization.lower().startswith("bearer "):
        key = authorization[7:].strip()
    principal = authenticate(session=session, settings=runtime.settings, key=key)
    # authenticate() may have read in a transaction: end it so the request's writes start fresh.
    session.rollback()
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def get_tenant_id(principal: PrincipalDep) -> str:
    if principal.tenant_id is None:
        raise Forbidden(
            "user data is reached with an app key of the user's tenant, not the admin key; "
            "create one with POST /v1/admin/tenants or `tiermem tenants key NAME`"
        )
    return principal.tenant_id


TenantDep = Annotated[str, Depends(get_tenant_id)]


def require_admin(principal: PrincipalDep) -> Principal:
    principal.require_admin()
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]

UserIdPath = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}$", description=ID_RULE)
]


def valid_user(user_id: UserIdPath, tenant_id: TenantDep, session: SessionDep) -> User:
    return find_user(session=session, tenant_id=tenant_id, user_external_id=user_id)


UserDep = Annotated[User, Depends(valid_user)]
