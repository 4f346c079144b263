"""The memory browser at /memory: a static page (with its script and style) that reads the
/v1 API with the key the person gives it (ADR 0028)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from services.api.routing import ApiRoute
from shared.ops import page

router = APIRouter(route_class=ApiRoute, include_in_schema=False)


@router.get("/memory", response_class=HTMLResponse)
def get_memory_page() -> HTMLResponse:
    return HTMLResponse(page.MEMORY_HTML)


@router.get("/memory/assets/{name}")
def get_memory_asset(name: Literal["memory.js", "memory.css"]) -> Response:
    text, media_type = page.MEMORY_FILES[name]
    return Response(text, media_type=media_type)
