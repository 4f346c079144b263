"""Admin: tenants (operator) and their API keys (operator, or a tenant admin for its own)."""

from __future__ import annotations

from fastapi import APIRouter
from sqlmodel import select

from services.api.deps import AdminDep, OperatorDep, SessionDep, TenantIdPath
from services.api.routing import ApiRoute
from shared.db.models import Tenant
from shared.records.tenancy import (
    KeyCreated,
    KeyIn,
    TenantCreated,
    TenantIn,
    TenantPublic,
    create_api_key,
    create_tenant,
)

router = APIRouter(prefix="/v1/admin", tags=["admin"], route_class=ApiRoute)


@router.post("/tenants", status_code=201, response_model=TenantCreated)
def post_tenant(body: TenantIn, session: SessionDep, _: OperatorDep) -> TenantCreated:
    tenant = create_tenant(session=session, name=body.name)
    row, key = create_api_key(session=session, tenant_id=tenant.id, name="default")
    return TenantCreated(
        tenant=TenantPublic(id=tenant.id, name=tenant.name),
        app_key=KeyCreated(id=row.id, tenant_id=row.tenant_id, scope=row.scope, key=key),
    )


@router.get("/tenants", response_model=list[TenantPublic])
def get_tenants(session: SessionDep, principal: AdminDep) -> list[TenantPublic]:
    query = select(Tenant).order_by(Tenant.name)
    if (own := principal.visible_tenant) is not None:
        query = query.where(Tenant.id == own)
    rows = session.exec(query).all()
    return [TenantPublic(id=t.id, name=t.name) for t in rows]


@router.post("/tenants/{tenant_id}/keys", status_code=201, response_model=KeyCreated)
def post_key(
    tenant_id: TenantIdPath, body: KeyIn, session: SessionDep, principal: AdminDep
) -> KeyCreated:
    principal.reach_tenant(tenant_id)
    row, key = create_api_key(
        session=session, tenant_id=tenant_id, scope=body.scope, name=body.name
    )
    return KeyCreated(id=row.id, tenant_id=row.tenant_id, scope=row.scope, key=key)
