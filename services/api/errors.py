"""One place that turns domain errors and bad requests into `{"error": {code, message, details}}`."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from shared.errors import DomainError

log = logging.getLogger(__name__)

STATUS_BY_CODE = {
    "not_found": 404,
    "invalid_input": 422,
    "conflict": 409,
    "unauthorized": 401,
    "forbidden": 403,
    "unavailable": 503,
    "transient": 503,
    "permanent": 502,
}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> JSONResponse:
        status = STATUS_BY_CODE.get(exc.code, 400)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse(
                error_body(
                    "malformed_json",
                    "the request body is not valid UTF-8 JSON; send a JSON object with "
                    "Content-Type: application/json",
                    {"errors": [_clean(e) for e in errors]},
                ),
                400,
            )
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid value')}" if where else first.get(
            "msg", "invalid request"
        )
        return JSONResponse(
            error_body("invalid_input", message, {"errors": [_clean(e) for e in errors]}), 422
        )


def _clean(error: Any) -> dict[str, Any]:
    # pydantic puts exception objects in ctx, and echoes the input (which may be huge)
    return {
        "loc": [str(p) for p in error.get("loc", ())],
        "msg": str(error.get("msg", "")),
        "type": str(error.get("type", "")),
    }
