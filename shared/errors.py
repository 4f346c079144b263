"""Domain errors: a code, an actionable message and details; the API maps codes to statuses."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    code = "error"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class NotFound(DomainError):
    code = "not_found"


class InvalidInput(DomainError):
    code = "invalid_input"


class UnsupportedMediaType(DomainError):
    """A request body that is not JSON (form-encoded, text/plain, no Content-Type)."""

    code = "unsupported_media_type"


class Conflict(DomainError):
    code = "conflict"


class Unauthorized(DomainError):
    code = "unauthorized"


class Forbidden(DomainError):
    code = "forbidden"


class Unavailable(DomainError):
    """A dependency (vector store, broker) cannot be reached from this process right now."""

    code = "unavailable"


class DamagedCollection(Unavailable):
    """A vector collection's files are damaged: its calls fail (503) until `tiermem reindex`
    drops it and rebuilds it from SQL, which holds every fact and message."""


class TransientError(DomainError):
    """Worth retrying: timeouts, connection errors, 429 and 5xx from the LLM, lock waits."""

    code = "transient"


class PermanentError(DomainError):
    """Retrying will not help: the run is marked failed with this message."""

    code = "permanent"


class ChatNotConfigured(Unavailable):
    """POST /v1/chat and /v1/chat/completions need a chat model endpoint."""

    code = "chat_not_configured"


class UpstreamError(DomainError):
    """The chat model's server failed or refused: connection, 429, 5xx, a bad key or model."""

    code = "upstream_error"


class UpstreamTimeout(UpstreamError):
    """The chat model did not answer within TIERMEM_CHAT__TIMEOUT_S."""

    code = "upstream_timeout"
