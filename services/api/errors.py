"""Turns domain errors and bad requests into `{"error": {code, message, details}}`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.api.routing import allowed_methods
from shared.errors import DomainError, InvalidInput
from shared.inputs import ID_PATTERN, ID_RULE, NON_BLANK_PATTERN, RequestModel

log = logging.getLogger(__name__)

MALFORMED_JSON = (
    "the request body is not valid JSON in UTF-8 (without a byte order mark); send a JSON "
    "object with Content-Type: application/json"
)

STATUS_BY_CODE = {
    "not_found": 404,
    "invalid_input": 422,
    "conflict": 409,
    "unsupported_media_type": 415,
    "unauthorized": 401,
    "forbidden": 403,
    "unavailable": 503,
    "transient": 503,
    "permanent": 502,
    "chat_not_configured": 503,
    "upstream_error": 502,
    "upstream_timeout": 504,
}


class ErrorDetail(BaseModel):
    code: str = Field(description="stable, for programs: invalid_input, not_found, forbidden, …")
    message: str = Field(description="for people: what is wrong and what to send instead")
    details: dict[str, Any]


class ErrorResponse(BaseModel):
    """Every error the API answers, whatever its status."""

    error: ErrorDetail


def _doc(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


# Documented on every operation (the schema says what the API does; schemathesis checks it).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _doc("malformed_json: the body is not valid UTF-8 JSON"),
    401: _doc("unauthorized: no key, or an unknown or revoked one"),
    403: _doc("forbidden: the key cannot reach this (README: API keys)"),
    404: _doc("not_found: no such user, session, job, memory or replay in the key's tenant"),
    409: _doc("conflict: the state does not allow it now (e.g. a replay already done)"),
    415: _doc("unsupported_media_type: a body that is not JSON (Content-Type: application/json)"),
    422: _doc("invalid_input: the message names the field and the rule it broke"),
    503: _doc("unavailable: a dependency cannot serve this now; send it again"),
}
UPSTREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    502: _doc("upstream_error: the chat model failed; the user's message is stored"),
    504: _doc("upstream_timeout: the chat model did not answer in time; the message is stored"),
}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> JSONResponse:
        status = STATUS_BY_CODE.get(exc.code, 400)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status, headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            error_body(
                "internal", f"internal error; the server log has the details ({type(exc).__name__})"
            ),
            500,
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse(
                error_body(
                    "malformed_json",
                    MALFORMED_JSON,
                    {"errors": [_clean(e) for e in errors]},
                ),
                400,
            )
        invalid = invalid_input(errors)
        return JSONResponse(error_body(invalid.code, invalid.message, invalid.details), 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's own errors (unknown path, wrong method, a body FastAPI cannot even
        # decode, e.g. invalid UTF-8 inside a JSON string) in the same shape as ours.
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            return JSONResponse(error_body("malformed_json", MALFORMED_JSON), 400)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers, message, details = exc.headers, str(exc.detail), None
        if exc.status_code == 405:
            methods = allowed_methods(request.app.router.routes, request.scope)
            headers = {**(headers or {}), "Allow": ", ".join(sorted(methods))}
        if exc.status_code == 404 and (route := _other_slash(request)):
            # Not a redirect: a client following a bare 307 never learns its path is wrong.
            which = "without" if request.url.path.endswith("/") else "with"
            message = (
                f"no route at {request.url.path}; the route is {route} ({which} the trailing slash)"
            )
            details = {"path": route}
        return JSONResponse(error_body(code, message, details), exc.status_code, headers)


def invalid_input(errors: Sequence[Any]) -> InvalidInput:
    """pydantic's errors as one invalid_input error: the most telling one named in words,
    all of them in details (the HTTP handler's 422, and an MCP tool's error)."""
    first = min(errors, key=_specificity) if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if not _is_tag(p))
    problem = _problem(first)
    message = f"{where}: {problem}" if where else problem
    return InvalidInput(message, details={"errors": [_clean(e) for e in errors]})


# A value tried against each member of a union (a message as an object or a string) fails
# in each; the error worth reading is ours, not "input should be a valid string".
OUR_ERRORS = (
    "invalid_unicode",
    "nul_character",
    "timestamp_range",
    "timestamp_type",
    "string_pattern_mismatch",
)
WRONG_TYPE = ("dict_type", "model_type", "model_attributes_type", "string_type", "none_required")


def _other_slash(request: Request) -> str | None:
    """The request's path with its trailing slash taken off, or one added, when a route
    serves that."""
    path = request.url.path
    other = path.rstrip("/") if path.endswith("/") else path + "/"
    scope = {**request.scope, "path": other, "root_path": ""}
    return other if other and allowed_methods(request.app.router.routes, scope) else None


def _problem(error: Any) -> str:
    """pydantic's message, in words a caller can act on for the rules we state most."""
    kind, ctx = error.get("type"), error.get("ctx", {})
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == ID_PATTERN:
        return f"invalid id; use {ID_RULE}"  # not the raw regex
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "empty; send the text"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == NON_BLANK_PATTERN:
        return "blank (only spaces and line breaks); send the text"
    if kind == "too_short" and ctx.get("min_length") == 1:
        return "empty; send at least one item, or leave the field out where it is optional"
    return str(error.get("msg", "invalid value"))


def _is_tag(part: Any) -> bool:
    """ "body", and the names pydantic gives union members ("str", "constrained-str",
    "function-after[...]", a model's class name): not a field of the request."""
    name = str(part)
    return (
        name in ("body", "str", "int")
        or name in _request_model_names()
        or "[" in name
        or name.endswith("-str")
    )


def _request_model_names() -> set[str]:
    names, todo = set(), [RequestModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            names.add(sub.__name__)
            todo.append(sub)
    return names


def _specificity(error: Any) -> int:
    kind = error.get("type")
    return 0 if kind in OUR_ERRORS else 2 if kind in WRONG_TYPE else 1


def _clean(error: Any) -> dict[str, Any]:
    # pydantic puts exception objects in ctx, and echoes the input (which may be huge)
    return {
        "loc": [str(p) for p in error.get("loc", ())],
        "msg": str(error.get("msg", "")),
        "type": str(error.get("type", "")),
    }
