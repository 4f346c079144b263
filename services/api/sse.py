"""Server-Sent Events from a blocking generator, run in threads, closed when the client leaves."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Generator, Mapping
from typing import Any

import anyio
from starlette.responses import StreamingResponse

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # nginx: do not buffer


def event(data: Mapping[str, Any] | str) -> str:
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {body}\n\n"


def sse_response(
    events: Generator[str, None, None], headers: Mapping[str, str] | None = None
) -> StreamingResponse:
    return StreamingResponse(
        _threaded(events), media_type="text/event-stream", headers={**HEADERS, **(headers or {})}
    )


def _step(events: Generator[str, None, None]) -> str | None:
    return next(events, None)


async def _threaded(events: Generator[str, None, None]) -> AsyncIterator[str]:
    try:
        while (item := await anyio.to_thread.run_sync(_step, events)) is not None:
            yield item
    finally:
        # A client that disconnects cancels this generator. Closing the blocking one (in a
        # thread, shielded from that cancellation) runs its cleanup, which stores the part
        # of the reply that was sent.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(events.close)
