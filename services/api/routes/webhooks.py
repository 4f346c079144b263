"""Webhooks (tenant admin, or the operator naming a tenant) and the events feed (a tenant's
app or admin key): the events of ADR 0027, pushed or read."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from services.api.deps import AdminDep, RuntimeDep, SessionDep, TenantDep
from services.api.routing import ApiRoute
from shared.errors import InvalidInput
from shared.inputs import ID_RULE, Identifier
from shared.webhooks import subscriptions
from shared.webhooks.feed import events_after
from shared.webhooks.models import (
    EventPage,
    PingResult,
    WebhookCreated,
    WebhookIn,
    WebhookList,
    WebhookPublic,
    WebhookUpdate,
)

router = APIRouter(tags=["webhooks"], route_class=ApiRoute)

WebhookIdPath = Annotated[Identifier, Path(description=f"a webhook's id; {ID_RULE}")]


@router.post("/v1/webhooks", status_code=201, response_model=WebhookCreated)
def post_webhook(
    body: WebhookIn, runtime: RuntimeDep, session: SessionDep, principal: AdminDep
) -> WebhookCreated:
    tenant_id = principal.reach_tenant(body.tenant_id)
    if tenant_id is None:
        raise InvalidInput(
            "name the tenant (tenant_id) whose events this webhook receives: the operator "
            "key belongs to none",
            details={"field": "tenant_id"},
        )
    return subscriptions.create_webhook(
        session=session, settings=runtime.settings, tenant_id=tenant_id, body=body
    )


@router.get("/v1/webhooks", response_model=WebhookList)
def get_webhooks(session: SessionDep, principal: AdminDep) -> WebhookList:
    return subscriptions.list_webhooks(session=session, tenant_id=principal.visible_tenant)


@router.get("/v1/webhooks/{webhook_id}", response_model=WebhookPublic)
def get_webhook(
    webhook_id: WebhookIdPath, session: SessionDep, principal: AdminDep
) -> WebhookPublic:
    return subscriptions.get_webhook(
        session=session, webhook_id=webhook_id, tenant_id=principal.visible_tenant
    )


@router.patch("/v1/webhooks/{webhook_id}", response_model=WebhookPublic)
def patch_webhook(
    webhook_id: WebhookIdPath,
    body: WebhookUpdate,
    runtime: RuntimeDep,
    session: SessionDep,
    principal: AdminDep,
) -> WebhookPublic:
    return subscriptions.update_webhook(
        session=session,
        settings=runtime.settings,
        webhook_id=webhook_id,
        tenant_id=principal.visible_tenant,
        body=body,
    )


@router.delete("/v1/webhooks/{webhook_id}", status_code=204)
def delete_webhook(webhook_id: WebhookIdPath, session: SessionDep, principal: AdminDep) -> Response:
    subscriptions.delete_webhook(
        session=session, webhook_id=webhook_id, tenant_id=principal.visible_tenant
    )
    return Response(status_code=204)


@router.post("/v1/webhooks/{webhook_id}/test", response_model=PingResult)
def post_webhook_test(
    webhook_id: WebhookIdPath, runtime: RuntimeDep, session: SessionDep, principal: AdminDep
) -> PingResult:
    """A signed `webhook.test` event sent now; the answer is what the receiver said."""
    return subscriptions.ping_webhook(
        session=session,
        settings=runtime.settings,
        webhook_id=webhook_id,
        tenant_id=principal.visible_tenant,
    )


@router.get("/v1/events", response_model=EventPage)
def get_events(
    session: SessionDep,
    tenant_id: TenantDep,
    after: Annotated[
        int,
        Query(ge=0, le=2**63 - 1, description="a cursor from an earlier page (0: from the start)"),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventPage:
    """The tenant's events in order, the same ones webhooks deliver."""
    return events_after(session=session, tenant_id=tenant_id, after=after, limit=limit)
