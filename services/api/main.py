"""The FastAPI application: create_app() wires settings, the runtime, the task queue and the
routes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from celery import Celery
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from sqlmodel import Session

from services.api.errors import ERROR_RESPONSES, install_error_handlers
from services.api.routes import (
    admin,
    chat,
    compression,
    context,
    health,
    history,
    jobs,
    mem0,
    memories,
    memory_page,
    messages,
    ops,
    replay,
    turns,
    users,
    webhooks,
)
from services.api.routing import yield_to_literal_segments
from services.mcp.http import mount_mcp
from shared import heap
from shared.config import Settings, get_settings
from shared.db.migrate import upgrade_to_head
from shared.flows.store_turn import TurnWriter
from shared.records.tenancy import ensure_dev_tenant
from shared.runtime import Runtime
from workers.task_queue import TaskQueue

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None,
    *,
    runtime: Runtime | None = None,
    celery: Celery | None = None,
    enqueue: Callable[[list[str]], None] | None = None,
) -> FastAPI:
    """`celery`: the Celery app to send tasks through (`tiermem serve` passes its workers');
    one is built from the settings by default. `enqueue`: extraction runs sent some other
    way (tests run them inline)."""
    settings = settings or (runtime.settings if runtime else get_settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.database.auto_migrate:
            upgrade_to_head(settings)
        rt = runtime or Runtime(settings)
        with Session(rt.engine) as session:
            ensure_dev_tenant(session=session, settings=settings)
        app.state.runtime = rt
        # Every route reaches the workers through this one object (deps.TasksDep).
        app.state.tasks = tasks = TaskQueue(settings, celery, extract=enqueue)
        app.state.turn_writer = TurnWriter(
            rt.engine,
            settings,
            after_commit=tasks.extract,
            max_batch=settings.database.turn_batch_max,
            timeout_s=settings.database.turn_timeout_s,
        )
        heap.settle()
        try:
            async with mcp_server.session_manager.run():
                yield
        finally:
            if not app.state.turn_writer.close():
                log.warning("the turn writer was still storing turns at shutdown")
        if runtime is None:
            rt.close()

    # FastAPIOffline: FastAPI whose /docs and /redoc load Swagger UI and ReDoc from files in
    # the package (served under /static-offline-docs), not a CDN: they work offline.
    app = FastAPIOffline(
        title="tiermem",
        version="0.1.0",
        description="Long-term memory for multi-user chat backends.",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
        # A path with a slash more or less than its route's is a 404 naming the route
        # (services.api.errors), not a bare 307 to a path the client did not ask for.
        redirect_slashes=False,
    )
    install_error_handlers(app)
    for module in (
        health,
        turns,
        chat,
        jobs,
        users,
        memories,
        history,
        context,
        messages,
        compression,
        admin,
        ops,
        memory_page,
        replay,
        webhooks,
        mem0,
    ):
        app.include_router(module.router)
    yield_to_literal_segments(app.router.routes)
    mcp_server = mount_mcp(app)
    return app
