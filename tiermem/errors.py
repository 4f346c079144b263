"""Typed exceptions built from the API's error body `{"error": {code, message, details}}`."""

from __future__ import annotations

import json
from typing import Any

import httpx


class TiermemError(Exception):
    """Every error the SDK raises: the API's stable `code`, its `message` for people, its
    `details`, the HTTP `status` (None when no answer came) and `retry_after` in seconds
    when the server named one."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.details = details or {}
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.message}"


class BadRequest(TiermemError):
    """400: the body is not JSON the API can read (`malformed_json`)."""


class Unauthorized(TiermemError):
    """401: no key, or an unknown or revoked one."""


class Forbidden(TiermemError):
    """403: the key cannot reach this."""


class NotFound(TiermemError):
    """404: no such user, session, job, memory or replay in the key's tenant."""


class Conflict(TiermemError):
    """409: the state does not allow it now."""


class ValidationFailed(TiermemError):
    """422 (or refused before sending): `details["errors"]` lists each field and rule."""


class RateLimited(TiermemError):
    """429, after the retries the policy allows."""


class ServerError(TiermemError):
    """5xx."""


class UpstreamError(ServerError):
    """502/504 from /v1/chat: the chat model failed or timed out; the message is stored."""


class Unavailable(ServerError):
    """503, after the retries the policy allows: send it again later."""


class ConnectionFailed(TiermemError):
    """No answer: the connection failed or was cut, after the retries the policy allows."""


class WaitTimedOut(TiermemError, TimeoutError):
    """A wait_for_* gave up before the job or run finished; `details` has its last state."""


BY_STATUS: dict[int, type[TiermemError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: ValidationFailed,
    429: RateLimited,
    502: UpstreamError,
    503: Unavailable,
    504: UpstreamError,
}


def error_class(status: int) -> type[TiermemError]:
    return BY_STATUS.get(status) or (ServerError if status >= 500 else TiermemError)


def from_response(response: httpx.Response, *, retry_after: float | None = None) -> TiermemError:
    """The typed error of an answer ≥ 400; a body not in the API's shape (a proxy's page)
    still gives an error of the status's class, with code `http_<status>`."""
    status = response.status_code
    code, message, details = f"http_{status}", response.reason_phrase or "error", {}
    try:
        error = json.loads(response.content)["error"]
        code, message = str(error["code"]), str(error["message"])
        details = dict(error.get("details") or {})
    except (ValueError, KeyError, TypeError):
        if response.content:
            message = response.text[:500]
    return error_class(status)(
        message, code=code, status=status, details=details, retry_after=retry_after
    )


def from_event(error: dict[str, Any]) -> TiermemError:
    """An error event inside a stream (the answer itself was 200)."""
    code = str(error.get("code", "error"))
    status = {"upstream_error": 502, "upstream_timeout": 504}.get(code)
    return (error_class(status) if status else TiermemError)(
        str(error.get("message", "")), code=code, status=status, details=error.get("details")
    )
