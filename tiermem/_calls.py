"""Requests as data: what to send and how to read the answer, apart from how it is sent.
The one layer both clients share; only sending, sleeping and iterating differ."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from shared.chat.models import ChatPublic
from tiermem.errors import (
    ConnectionFailed,
    ValidationFailed,
    WaitTimedOut,
    from_event,
    from_response,
)
from tiermem.retry import parse_retry_after

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[bytes], T]
    params: tuple[tuple[str, str], ...] = ()
    body: Any = None  # JSON-ready

    def answer(self, outcome: httpx.Response | httpx.TransportError, attempts: int = 1) -> T:
        """The answer's value, or its typed error (ConnectionFailed when none came)."""
        if isinstance(outcome, httpx.TransportError):
            raise ConnectionFailed(
                f"{self.method} {self.path}: {type(outcome).__name__}: {outcome}",
                code="connection_failed",
                details={"attempts": attempts},
            ) from outcome
        response = outcome
        if response.status_code >= 400:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            raise from_response(response, retry_after=retry_after)
        return self.read(response.content)


@dataclass(frozen=True)
class Poll(Generic[T]):
    """Ask `call` every `interval_s` until `done` says so, for at most `timeout_s`."""

    call: Call[T]
    done: Callable[[T], bool]
    timeout_s: float
    interval_s: float
    what: str

    def timed_out(self, last: T) -> WaitTimedOut:
        state = last.model_dump(mode="json") if isinstance(last, BaseModel) else {}
        return WaitTimedOut(
            f"{self.what} did not finish within {self.timeout_s:g}s",
            code="wait_timeout",
            details={"last": state},
        )


@dataclass(frozen=True)
class Pages(Generic[T]):
    """limit/offset pages: `page(offset)` asks for the items from there; a short page is
    the last."""

    page: Callable[[int], Call[list[T]]]
    size: int


def reads(model: type[M]) -> Callable[[bytes], M]:
    return model.model_validate_json


def reads_list(model: type[M]) -> Callable[[bytes], list[M]]:
    return TypeAdapter(list[model]).validate_json  # type: ignore[valid-type]


def reads_nothing(_: bytes) -> None:
    return None


def segment(value: str) -> str:
    """A path segment: ids are restricted by the API, but never trusted to be URL-safe."""
    return quote(value, safe="")


def query_params(**values: Any) -> tuple[tuple[str, str], ...]:
    """Query parameters without the unset ones; a sequence repeats its name."""
    out: list[tuple[str, str]] = []
    for name, value in values.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            if item is not None:
                out.append((name, str(item).lower() if isinstance(item, bool) else str(item)))
    return tuple(out)


def body(schema: type[BaseModel], /, **fields: Any) -> dict[str, Any]:
    """A request body built by the server's own request model, so a field it would refuse is
    refused here, as the same ValidationFailed, before anything is sent."""
    try:
        built = schema(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        errors = [
            {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
            for e in exc.errors()
        ]
        first = errors[0]
        raise ValidationFailed(
            f"{'.'.join(first['loc'])}: {first['msg']}",
            code="invalid_input",
            details={"errors": errors},
        ) from None
    dumped: dict[str, Any] = built.model_dump(mode="json", exclude_unset=True)
    return dumped


class ChatEvents:
    """Reads /v1/chat's event stream: deltas, then the turn's ids (`result`) or an error."""

    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.result: ChatPublic | None = None

    def feed(self, line: str) -> str | None:
        if not line.startswith("data:"):
            return None
        event: dict[str, Any] = json.loads(line[len("data:") :])
        if "delta" in event:
            delta = str(event["delta"])
            self.deltas.append(delta)
            return delta
        if "error" in event:
            raise from_event(event["error"])
        if event.pop("done", False):
            self.result = ChatPublic.model_validate({**event, "reply": "".join(self.deltas)})
        return None
