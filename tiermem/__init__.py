"""tiermem's Python SDK: `from tiermem import Client, AsyncClient`."""

from __future__ import annotations

__version__ = "0.1.0"

from tiermem.client import AsyncClient, Client  # noqa: E402
from tiermem.errors import (  # noqa: E402
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    NotFound,
    RateLimited,
    ServerError,
    TiermemError,
    Unauthorized,
    Unavailable,
    UpstreamError,
    ValidationFailed,
    WaitTimedOut,
)
from tiermem.retry import NO_RETRIES, RetryPolicy  # noqa: E402

__all__ = [
    "NO_RETRIES",
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "NotFound",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "TiermemError",
    "Unauthorized",
    "Unavailable",
    "UpstreamError",
    "ValidationFailed",
    "WaitTimedOut",
    "__version__",
]
