"""The API freezes its startup heap, so full collections do not walk it (shared.heap); the
suite lets go of every app it made once its test is done (issue 24)."""

from __future__ import annotations

import gc
import weakref

from fastapi.testclient import TestClient

from services.api.main import create_app
from shared.runtime import Runtime
from tests.factories import APP_KEY, forget_finished_apps


def _tracked(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_the_api_freezes_what_it_loaded_at_startup(runtime: Runtime) -> None:
    gc.unfreeze()  # conftest unfreezes again after the test
    app = create_app(runtime=runtime, enqueue=lambda ids: None)
    assert _tracked(app.router)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_freeze_count() > 0
        assert not _tracked(app.router)  # frozen: out of the collector's generations


def test_an_app_is_freed_once_its_test_is_done(runtime: Runtime) -> None:
    """What the suite's teardown does after each test: without it every app (and the
    Runtime, engines and model it holds) outlived its test, 12-14 GB over a run."""
    app = create_app(runtime=runtime, enqueue=lambda ids: None)
    with TestClient(app) as client:
        # The per-app routes FastAPI's caches keep: fastapi_offline's pages and /mcp.
        assert client.get("/docs").status_code == 200
        assert client.get("/redoc").status_code == 200
        mcp = client.post("/mcp", headers={"Authorization": f"Bearer {APP_KEY}"}, json={})
        assert mcp.status_code < 500
    app_ref = weakref.ref(app)
    del app, client
    forget_finished_apps()
    gc.unfreeze()
    gc.collect()
    assert app_ref() is None
