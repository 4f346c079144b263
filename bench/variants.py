"""`tiermem api` / `tiermem worker` with candidate performance fixes applied as patches.

Nothing here is product code: each patch is a measured experiment standing in for a
change to services/ or shared/ (bench.bench_ingest and bench.bench_extraction report the
numbers). Patches are named in BENCH_PATCHES (comma-separated) so that uvicorn's worker
processes, which import the app factory afresh, apply them too:

- `async_deps`: the dependencies that do no I/O (runtime, tenant id, and the principal
  when `auth_cache` answers it) become `async def`, so a request makes 3 threadpool hops
  instead of 6.
- `auth_cache`: API keys resolved from the database are kept for 30 s per process
  (a revoked key keeps working up to 30 s there).
- `no_sent_event`: Celery's task-sent event (one more Redis publish per task) is off.
- `sqlite_pool`: the SQLite engine keeps up to 64 (+64) connections instead of
  SQLAlchemy's 5 (+10), so worker threads do not wait for a connection.

(`sqlite_lock` and `lock_poll` were measured here and now ship: shared.db.engine.WriteGate
and the local queue in front of shared.memory.locks.RedisUserLocks.)

Run: BENCH_PATCHES=auth_cache,async_deps python -m bench.variants api --port 8000
     BENCH_PATCHES=sqlite_pool python -m bench.variants worker --queues extract
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import FastAPI, Header, Request
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from services.api import deps
from shared.errors import Forbidden
from shared.records.tenancy import Principal, authenticate
from shared.runtime import Runtime

PATCHES_ENV = "BENCH_PATCHES"
KNOWN = ("async_deps", "auth_cache", "no_sent_event", "sqlite_pool")
SQLITE_POOL = 64
AUTH_TTL_S = 30.0


def _enabled() -> set[str]:
    names = {n.strip() for n in os.environ.get(PATCHES_ENV, "").split(",") if n.strip()}
    unknown = names - set(KNOWN)
    if unknown:
        raise SystemExit(f"unknown patches {sorted(unknown)}; known: {', '.join(KNOWN)}")
    return names


def _patch_auth_cache() -> None:
    cache: dict[str, tuple[float, Principal]] = {}

    def cached(*, session: Any, settings: Any, key: str | None) -> Principal:
        digest = hashlib.sha256((key or "").encode()).hexdigest()
        hit = cache.get(digest)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        principal = authenticate(session=session, settings=settings, key=key)
        cache[digest] = (now + AUTH_TTL_S, principal)
        return principal

    # Monkeypatching is the experiment: get_principal looks `authenticate` up per call.
    setattr(deps, "authenticate", cached)  # noqa: B010
    setattr(deps, "_bench_auth_cache", cache)  # noqa: B010


def _swap(alias: Any, dependency: Any) -> None:
    # Depends is a frozen dataclass; routes copy its callable when they are declared.
    object.__setattr__(alias.__metadata__[0], "dependency", dependency)


def _patch_async_deps(auth_cache: bool) -> None:
    """Swap the dependency callables inside deps' Annotated aliases before routes import them."""

    async def get_runtime(request: Request) -> Runtime:
        runtime: Runtime = request.app.state.runtime
        return runtime

    async def get_tenant_id(principal: deps.PrincipalDep) -> str:
        if principal.tenant_id is None:
            raise Forbidden("user data is reached with an app key of the user's tenant")
        return principal.tenant_id

    _swap(deps.RuntimeDep, get_runtime)
    _swap(deps.TenantDep, get_tenant_id)
    if not auth_cache:
        return
    cache: dict[str, tuple[float, Principal]] = deps._bench_auth_cache  # type: ignore[attr-defined]

    async def get_principal(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
    ) -> Principal:
        key = x_api_key
        if authorization and authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        hit = cache.get(hashlib.sha256((key or "").encode()).hexdigest())
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        runtime: Runtime = request.app.state.runtime

        def lookup() -> Principal:
            with Session(runtime.engine) as session:
                resolve = getattr(deps, "authenticate")  # noqa: B009  # the cached one
                principal: Principal = resolve(session=session, settings=runtime.settings, key=key)
                return principal

        result: Principal = await run_in_threadpool(lookup)
        return result

    _swap(deps.PrincipalDep, get_principal)


def _patch_no_sent_event() -> None:
    from workers import celery_app, task_queue

    original = celery_app.make_celery

    def make_celery(settings: Any) -> Any:
        app = original(settings)
        app.conf.task_send_sent_event = False
        return app

    for module in (celery_app, task_queue):  # every app built from here on
        setattr(module, "make_celery", make_celery)  # noqa: B010


def _patch_sqlite_pool() -> None:
    from shared.db import engine as engine_module

    original = getattr(engine_module, "create_engine")  # noqa: B009

    def create_engine(url: Any, **kwargs: Any) -> Any:
        if str(url).startswith("sqlite") and ":memory:" not in str(url):
            kwargs.setdefault("pool_size", SQLITE_POOL)
            kwargs.setdefault("max_overflow", SQLITE_POOL)
        return original(url, **kwargs)

    setattr(engine_module, "create_engine", create_engine)  # noqa: B010


def apply_patches() -> set[str]:
    enabled = _enabled()
    if "auth_cache" in enabled:
        _patch_auth_cache()
    if "async_deps" in enabled:
        _patch_async_deps(auth_cache="auth_cache" in enabled)
    if "no_sent_event" in enabled:
        _patch_no_sent_event()
    if "sqlite_pool" in enabled:
        _patch_sqlite_pool()
    return enabled


def create_app() -> FastAPI:
    """The uvicorn factory: patch first, then import the routes and build the app."""
    apply_patches()
    from services.api.main import create_app as product_create_app

    return product_create_app()


def main(argv: Sequence[str] | None = None) -> None:
    """`api [--port P] [--workers N]`, or `worker ARGS…` (the `tiermem worker` options)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("api", "worker"):
        raise SystemExit(
            "usage: python -m bench.variants api [--port P] [--workers N] | "
            "worker [tiermem worker options]"
        )
    if args[0] == "worker":
        apply_patches()  # in this process: the thread pool runs here, prefork children fork
        from services.cli.main import cli

        cli(args, prog_name="bench.variants")
        return
    import uvicorn

    from shared.config import get_settings

    parser = argparse.ArgumentParser(prog="python -m bench.variants api")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1)
    options = parser.parse_args(args[1:])
    _enabled()  # refuse unknown names before starting anything
    settings = get_settings()
    uvicorn.run(
        "bench.variants:create_app",
        factory=True,
        host=settings.host,
        port=options.port or settings.port,
        workers=options.workers,
        log_level=settings.log_level.lower(),
    )


if __name__ == "__main__":
    main()
