"""Retries over real HTTP: a tiny server on 127.0.0.1 answers what each test scripts (503
with Retry-After, 429, 404, a dropped connection), then the SDK's attempts and waits are
measured. The API itself cannot be made to answer 503 on cue; the protocol is the point."""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from shared.records.runs import JobPublic
from tiermem import (
    AsyncClient,
    Client,
    ConnectionFailed,
    NotFound,
    RateLimited,
    RetryPolicy,
    Unavailable,
)
from tiermem.retry import parse_retry_after

JOB = JobPublic(
    id="j1", status="done", attempts=1, error=None, message_id="m1", reply_message_id=None,
    extractor="offline", extractor_version="offline-3", model=None, prompt_hash=None,
    facts_extracted=1, facts_invalid=0, facts_added=1, facts_merged=0, facts_superseded=0,
    skipped_reason=None, prompt_tokens=0, completion_tokens=0, llm_ms=0.0, duration_ms=1.0,
    created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), started_at=None, finished_at=None,
)  # fmt: skip
FAST = RetryPolicy(max_attempts=4, backoff_s=0.01, max_backoff_s=0.05)


class Scripted:
    """Answers the scripted (status, headers) in turn, then 200 with JOB; records when each
    request came."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str]]] = []
        self.seen: list[tuple[float, str, str]] = []

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        self.seen.append((time.time(), handler.command, handler.path))
        status, headers = self.script.pop(0) if self.script else (200, {})
        if status == 0:  # drop the connection without an answer
            handler.close_connection = True
            handler.connection.close()
            return
        error = {"error": {"code": f"status_{status}", "message": "scripted", "details": {"n": 1}}}
        body = JOB.model_dump_json().encode() if status == 200 else json.dumps(error).encode()
        handler.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


@pytest.fixture(name="scripted")
def scripted_fixture() -> Iterator[tuple[Scripted, str]]:
    scripted = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            scripted.answer(self)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            scripted.answer(self)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield scripted, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def gaps(scripted: Scripted) -> list[float]:
    times = [t for t, _, _ in scripted.seen]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_503_with_retry_after_seconds_is_waited_for_then_answered(
    scripted: tuple[Scripted, str],
) -> None:
    server, url = scripted
    server.script = [(503, {"Retry-After": "1"})]
    with Client(url, "k", retry=FAST) as client:
        assert client.get_job("j1") == JOB
    assert len(server.seen) == 2
    assert 1.0 <= gaps(server)[0] < 1.5


def test_retry_after_as_an_http_date_and_429(scripted: tuple[Scripted, str]) -> None:
    server, url = scripted
    when = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).replace(microsecond=0)
    server.script = [(429, {"Retry-After": email.utils.format_datetime(when, usegmt=True)})]
    with Client(url, "k", retry=FAST) as client:
        assert client.get_job("j1").id == "j1"
    assert len(server.seen) == 2
    second_at = server.seen[1][0]
    assert when.timestamp() <= second_at < when.timestamp() + 0.5


def test_backoff_grows_and_attempts_are_bounded(scripted: tuple[Scripted, str]) -> None:
    server, url = scripted
    server.script = [(503, {})] * 5
    policy = RetryPolicy(max_attempts=3, backoff_s=0.2, max_backoff_s=1.0, random=lambda: 1.0)
    with Client(url, "k", retry=policy) as client, pytest.raises(Unavailable) as failed:
        client.get_job("j1")
    assert len(server.seen) == 3 and failed.value.status == 503
    assert failed.value.code == "status_503" and failed.value.details == {"n": 1}
    first, second = gaps(server)
    assert 0.2 <= first < 0.35 and 0.4 <= second < 0.6


def test_a_retry_after_beyond_the_policy_is_raised_with_it(scripted: tuple[Scripted, str]) -> None:
    server, url = scripted
    server.script = [(429, {"Retry-After": "3600"})]
    with Client(url, "k", retry=FAST) as client, pytest.raises(RateLimited) as limited:
        client.get_job("j1")
    assert len(server.seen) == 1 and limited.value.retry_after == 3600


def test_4xx_other_than_429_is_never_retried(scripted: tuple[Scripted, str]) -> None:
    server, url = scripted
    server.script = [(404, {}), (422, {})]
    with Client(url, "k", retry=FAST) as client, pytest.raises(NotFound):
        client.get_job("j1")
    assert len(server.seen) == 1


def test_a_dropped_connection_is_retried_for_a_get_not_for_a_post(
    scripted: tuple[Scripted, str],
) -> None:
    server, url = scripted
    server.script = [(0, {})]
    with Client(url, "k", retry=FAST) as client:
        assert client.get_job("j1").id == "j1"
        assert len(server.seen) == 2
        server.script = [(0, {})]
        with pytest.raises(ConnectionFailed):
            client.store_turn("s1", user_id="ana", user_message="hi")
    assert [method for _, method, _ in server.seen] == ["GET", "GET", "POST"]


def test_a_refused_connection_is_retried_up_to_the_bound() -> None:
    client = Client("http://127.0.0.1:9", "k", retry=FAST)
    with client, pytest.raises(ConnectionFailed) as refused:
        client.store_turn("s1", user_id="ana", user_message="hi")
    assert refused.value.details == {"attempts": 4} and refused.value.status is None


@pytest.mark.anyio
async def test_async_client_waits_for_retry_after_too(scripted: tuple[Scripted, str]) -> None:
    server, url = scripted
    server.script = [(503, {"Retry-After": "1"}), (429, {})]
    async with AsyncClient(url, "k", retry=FAST) as client:
        assert await client.get_job("j1") == JOB
    assert len(server.seen) == 3 and gaps(server)[0] >= 1.0


def test_retry_after_parsing() -> None:
    now = dt.datetime(2026, 5, 7, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("120") == 120
    assert parse_retry_after("Thu, 07 May 2026 12:00:30 GMT", now=now) == 30
    assert parse_retry_after("Thu, 07 May 2026 11:00:00 GMT", now=now) == 0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
