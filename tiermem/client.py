"""Client (blocking, httpx.Client) and AsyncClient (httpx.AsyncClient): the same methods,
declared once in `Endpoints`."""

from __future__ import annotations

from tiermem._endpoints import Endpoints
from tiermem._transport import AsyncTransport, SyncTransport


class Client(SyncTransport, Endpoints):
    """`Client(base_url, api_key, timeout=30.0, retry=RetryPolicy(...))`; close it, or use
    it as a context manager. Errors are TiermemError subclasses; 429, 503 and failed
    connections are retried as `retry` says."""


class AsyncClient(AsyncTransport, Endpoints):
    """Client for asyncio: every method returns an awaitable (iter_memories an async
    iterator, chat_stream an async iterable); `async with AsyncClient(...)` or `aclose()`."""
