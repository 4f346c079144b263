"""Liveness and readiness probes (no key needed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from sqlalchemy import text

from services.api.deps import RuntimeDep, SessionDep
from services.api.routing import ApiRoute

router = APIRouter(tags=["health"], route_class=ApiRoute)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(session: SessionDep, runtime: RuntimeDep) -> dict[str, Any]:
    session.execute(text("SELECT 1"))
    return {
        "status": "ok",
        "extractor": runtime.settings.extractor_kind,
        "embedded_worker": runtime.settings.redis_url is None,
        "vector_store_open": runtime.vectors_open,
    }
