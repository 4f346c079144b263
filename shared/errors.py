"""Domain errors: a code, a message a person can act on, and details; the API maps codes to statuses."""

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


class Conflict(DomainError):
    code = "conflict"


class Unauthorized(DomainError):
    code = "unauthorized"


class Forbidden(DomainError):
    code = "forbidden"


class Unavailable(DomainError):
    """A dependency (vector store, broker) cannot be reached from this process right now."""

    code = "unavailable"


class TransientError(DomainError):
    """Worth retrying: timeouts, connection errors, 429 and 5xx from the LLM, lock waits."""

    code = "transient"


class PermanentError(DomainError):
    """Retrying will not help: the run is marked failed with this message."""

    code = "permanent"
