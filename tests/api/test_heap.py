"""The API freezes its startup heap, so full collections do not walk it (shared.heap)."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from services.api.main import create_app
from shared.runtime import Runtime


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
