"""`tiermem mcp`: the memory tools over stdio for an MCP client, served by a running API."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from rich.console import Console

from services.cli.settings import load_settings


def mcp(
    url: Annotated[
        str | None, typer.Option(help="the tiermem API; default TIERMEM_MCP__URL")
    ] = None,
    key: Annotated[
        str | None, typer.Option(help="an app key; default TIERMEM_MCP__API_KEY")
    ] = None,
) -> None:
    """MCP over stdio (Claude Desktop, Cursor, …): the memory tools, answered by a running
    `tiermem serve` / `tiermem api` with an app key (ADR 0016)."""
    import anyio
    from mcp.server.mcpserver import Context

    from services.mcp.remote import ApiError, RemoteBackend
    from services.mcp.tools import build_server
    from shared.errors import Unavailable

    settings = load_settings()
    # stdout carries the protocol: every log line goes to stderr.
    logging.basicConfig(level=settings.log_level, format="%(levelname)s %(name)s: %(message)s")
    say = Console(stderr=True, soft_wrap=True, highlight=False).print
    api_key = key or settings.mcp.api_key
    if not api_key:
        say(
            "tiermem mcp needs an app key: --key or TIERMEM_MCP__API_KEY "
            "(`tiermem tenants key NAME` makes one; `dev-app-key` in development)"
        )
        raise typer.Exit(2)
    backend = RemoteBackend(
        url=url or settings.mcp.url, key=api_key, timeout_s=settings.mcp.timeout_s
    )

    def backend_of(_: Context[Any, Any]) -> RemoteBackend:
        return backend

    async def run() -> int:
        try:
            try:
                await backend.check_key()
            except (ApiError, Unavailable) as exc:
                if exc.code in ("unauthorized", "forbidden"):
                    say(
                        f"tiermem mcp: the tiermem API at {backend.url} refused the key "
                        "(--key / TIERMEM_MCP__API_KEY; `tiermem tenants key NAME` makes an "
                        f"app key): {exc.code}: {exc.message}",
                        markup=False,
                    )
                    return 2
                # An MCP client may start this before the API: its tools answer
                # `unavailable` until the API is up, which checks the key at each call.
                say(f"tiermem mcp: the key is not checked yet: {exc.message}", markup=False)
            await build_server(backend_of).run_stdio_async()
            return 0
        finally:
            await backend.aclose()

    if code := anyio.run(run):
        raise typer.Exit(code)
