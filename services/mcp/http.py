"""/mcp in the API: MCP's streamable HTTP transport behind the same key check as /v1.

The route runs the API's own principal dependency (a missing or wrong key is the API's 401
before any MCP message is read), then hands the untouched request to the SDK's session
manager. Stateless and JSON: no session lives in one process, so `tiermem api --workers N`
and several API replicas serve /mcp as they serve /v1.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from services.api.deps import PrincipalDep
from services.mcp.local import LocalBackend
from services.mcp.tools import TiermemMCP, build_server
from shared.records.tenancy import Principal

PRINCIPAL = "tiermem.principal"  # the ASGI scope key the route leaves the caller under


class _Delegate(Response):
    """A response that is another ASGI app answering the same request (the MCP transport)."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__()
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def _local_backend(ctx: Context[Any, Any]) -> LocalBackend:
    request = ctx.request_context.request
    if not isinstance(request, Request) or PRINCIPAL not in request.scope:
        raise RuntimeError("an MCP tool of the API ran without the /mcp route's caller")
    principal: Principal = request.scope[PRINCIPAL]
    state = request.app.state
    return LocalBackend(runtime=state.runtime, turn_writer=state.turn_writer, principal=principal)


def mount_mcp(app: FastAPI) -> TiermemMCP:
    """Add /mcp to `app`; the caller's lifespan runs `server.session_manager.run()`."""
    server = build_server(_local_backend)
    server.streamable_http_app(  # builds the session manager; its own Starlette app is unused
        stateless_http=True,
        json_response=True,
        # Every request carries a key, as /v1's do, and the API may sit behind any host name
        # (compose's `api:8000`): the SDK's localhost-only Host check would refuse those.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    handle = server.session_manager.handle_request

    @app.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
    async def mcp(request: Request, principal: PrincipalDep) -> Response:
        request.scope[PRINCIPAL] = principal
        return _Delegate(handle)

    return server
