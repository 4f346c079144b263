"""Sending: retries, polling, paging and streaming over httpx, once for each I/O style, and
the descriptors that give both clients every endpoint of `_endpoints.Endpoints`."""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Concatenate,
    Generic,
    ParamSpec,
    Self,
    TypeVar,
    overload,
)

import httpx

from shared.chat.models import ChatPublic
from tiermem import __version__
from tiermem._calls import Call, ChatEvents, Pages, Poll
from tiermem.retry import RetryPolicy

P = ParamSpec("P")
T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0


def http_options(
    base_url: str, api_key: str, timeout: float | httpx.Timeout, headers: dict[str, str] | None
) -> dict[str, Any]:
    return {
        "base_url": base_url.rstrip("/"),
        "timeout": timeout,
        "headers": {
            "Authorization": f"Bearer {api_key}",
            "User-Agent": f"tiermem-python/{__version__}",
            **(headers or {}),
        },
    }


class SyncTransport:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        options = http_options(base_url, api_key, timeout, headers)
        self._http = httpx.Client(transport=transport, **options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _send(self, call: Call[T]) -> T:
        request = self._http.build_request(
            call.method, call.path, params=call.params, json=call.body
        )
        for attempt in itertools.count(1):
            try:
                outcome: httpx.Response | httpx.TransportError = self._http.send(request)
            except httpx.TransportError as error:
                outcome = error
            if (delay := self.retry.delay(attempt, outcome, call.method)) is None:
                return call.answer(outcome, attempt)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _run(self, plan: Call[T] | Poll[T]) -> T:
        if isinstance(plan, Call):
            return self._send(plan)
        deadline = time.monotonic() + plan.timeout_s
        while not plan.done(value := self._send(plan.call)):
            if time.monotonic() >= deadline:
                raise plan.timed_out(value)
            time.sleep(min(plan.interval_s, max(0.0, deadline - time.monotonic())))
        return value

    def _walk(self, pages: Pages[T]) -> Iterator[T]:
        offset = 0
        while True:
            items = self._send(pages.page(offset))
            yield from items
            if len(items) < pages.size:
                return
            offset += len(items)

    def _stream(self, call: Call[ChatPublic]) -> ChatStream:
        return ChatStream(self._lines(call))

    def _lines(self, call: Call[ChatPublic]) -> Iterator[str]:
        # Not retried: a stream that failed midway has stored the user's message already.
        with self._http.stream(call.method, call.path, json=call.body) as response:
            if response.status_code >= 400:
                response.read()
                call.answer(response)
            yield from response.iter_lines()


class AsyncTransport:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        options = http_options(base_url, api_key, timeout, headers)
        self._http = httpx.AsyncClient(transport=transport, **options)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        request = self._http.build_request(
            call.method, call.path, params=call.params, json=call.body
        )
        for attempt in itertools.count(1):
            try:
                outcome: httpx.Response | httpx.TransportError = await self._http.send(request)
            except httpx.TransportError as error:
                outcome = error
            if (delay := self.retry.delay(attempt, outcome, call.method)) is None:
                return call.answer(outcome, attempt)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _run(self, plan: Call[T] | Poll[T]) -> T:
        if isinstance(plan, Call):
            return await self._send(plan)
        deadline = time.monotonic() + plan.timeout_s
        while not plan.done(value := await self._send(plan.call)):
            if time.monotonic() >= deadline:
                raise plan.timed_out(value)
            await asyncio.sleep(min(plan.interval_s, max(0.0, deadline - time.monotonic())))
        return value

    async def _walk(self, pages: Pages[T]) -> AsyncIterator[T]:
        offset = 0
        while True:
            items = await self._send(pages.page(offset))
            for item in items:
                yield item
            if len(items) < pages.size:
                return
            offset += len(items)

    def _stream(self, call: Call[ChatPublic]) -> AsyncChatStream:
        return AsyncChatStream(self._lines(call))

    async def _lines(self, call: Call[ChatPublic]) -> AsyncIterator[str]:
        async with self._http.stream(call.method, call.path, json=call.body) as response:
            if response.status_code >= 400:
                await response.aread()
                call.answer(response)
            async for line in response.aiter_lines():
                yield line


class ChatStream:
    """The reply's deltas as they come; once exhausted, `result` holds the stored turn's
    ids, usage and context counts (its `reply` is the whole text)."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines, self._events = lines, ChatEvents()

    @property
    def result(self) -> ChatPublic | None:
        return self._events.result

    def __iter__(self) -> Iterator[str]:
        for line in self._lines:
            if (delta := self._events.feed(line)) is not None:
                yield delta


class AsyncChatStream:
    """ChatStream for AsyncClient: `async for delta in stream`."""

    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines, self._events = lines, ChatEvents()

    @property
    def result(self) -> ChatPublic | None:
        return self._events.result

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            if (delta := self._events.feed(line)) is not None:
                yield delta


# One declaration per endpoint serves both clients: the descriptor hands the built request
# to the instance's transport (`runner`), so a Client call returns the value and an
# AsyncClient call an awaitable of it, with the endpoint's own signature and docstring. The
# subclasses only say, for the type checker, what each kind of client gets back.


class _Descriptor:
    runner: ClassVar[str]

    def __init__(self, build: Callable[..., Any]) -> None:
        self.build = build

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        if obj is None:
            return self
        run, build = getattr(obj, self.runner), self.build

        @functools.wraps(build)
        def bound(*args: Any, **kwargs: Any) -> Any:
            return run(build(obj, *args, **kwargs))

        return bound


class endpoint(_Descriptor, Generic[P, T]):  # noqa: N801  (a decorator)
    runner = "_run"

    def __init__(self, build: Callable[Concatenate[Any, P], Call[T] | Poll[T]]) -> None:
        super().__init__(build)

    if TYPE_CHECKING:

        @overload
        def __get__(self, obj: None, owner: type[Any]) -> Self: ...
        @overload
        def __get__(self, obj: SyncTransport, owner: type[Any]) -> Callable[P, T]: ...
        @overload
        def __get__(
            self, obj: AsyncTransport, owner: type[Any]
        ) -> Callable[P, Coroutine[Any, Any, T]]: ...
        def __get__(self, obj: Any, owner: type[Any]) -> Any: ...


class paged(_Descriptor, Generic[P, T]):  # noqa: N801
    runner = "_walk"

    def __init__(self, build: Callable[Concatenate[Any, P], Pages[T]]) -> None:
        super().__init__(build)

    if TYPE_CHECKING:

        @overload
        def __get__(self, obj: None, owner: type[Any]) -> Self: ...
        @overload
        def __get__(self, obj: SyncTransport, owner: type[Any]) -> Callable[P, Iterator[T]]: ...
        @overload
        def __get__(
            self, obj: AsyncTransport, owner: type[Any]
        ) -> Callable[P, AsyncIterator[T]]: ...
        def __get__(self, obj: Any, owner: type[Any]) -> Any: ...


class streamed(_Descriptor, Generic[P]):  # noqa: N801
    runner = "_stream"

    def __init__(self, build: Callable[Concatenate[Any, P], Call[ChatPublic]]) -> None:
        super().__init__(build)

    if TYPE_CHECKING:

        @overload
        def __get__(self, obj: None, owner: type[Any]) -> Self: ...
        @overload
        def __get__(self, obj: SyncTransport, owner: type[Any]) -> Callable[P, ChatStream]: ...
        @overload
        def __get__(
            self, obj: AsyncTransport, owner: type[Any]
        ) -> Callable[P, AsyncChatStream]: ...
        def __get__(self, obj: Any, owner: type[Any]) -> Any: ...
