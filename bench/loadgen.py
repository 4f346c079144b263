"""Open-loop load generator for POST /v1/sessions/{sid}/turns (run by bench.bench_ingest).

Requests are sent on a wall-clock schedule (request i at t0 + i/rate) whatever the server
does, and latency is measured from the *scheduled* time, so a stalled server or a slow
client shows up in the numbers instead of silently lowering the offered rate (coordinated
omission). The actual send time is recorded too, to tell generator lag from server time.

Two clients: `raw`, a minimal keep-alive HTTP/1.1 client on asyncio streams (the default:
about a tenth of httpx's CPU per request, which matters when the generator shares two
cores with the server), and `httpx` (httpx.AsyncClient).

Protocol on stdout: `MARK measure_start`, `MARK measure_end`, then one `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from bench._common import assistant_replies, user_messages


@dataclass
class PhaseResult:
    offered_rate: float
    sent: int = 0
    duration_s: float = 0.0  # first scheduled send → last response
    latency_ms: list[float] = field(default_factory=list)  # from the scheduled send time
    service_ms: list[float] = field(default_factory=list)  # from the actual send
    lag_ms: list[float] = field(default_factory=list)  # actual send − scheduled send
    statuses: dict[str, int] = field(default_factory=dict)


class TurnBodies:
    """Pre-serialized request bodies, so the generator spends its CPU on sending."""

    def __init__(self, *, users: int, seed: int, external_ids: bool) -> None:
        self.users = [f"bench-u{i:04d}" for i in range(users)]
        self._rng = random.Random(seed)
        self._user_text = user_messages(2000, seed=seed)
        self._replies = assistant_replies(500, seed=seed + 7)
        self._external_ids = external_ids
        self._counter = 0

    def next(self) -> tuple[str, bytes]:
        self._counter += 1
        user = self._rng.choice(self.users)
        user_message: dict[str, str] = {"content": self._rng.choice(self._user_text)}
        reply: dict[str, str] = {"content": self._rng.choice(self._replies)}
        if self._external_ids:  # what a client that retries safely sends
            user_message["external_id"] = f"m{self._counter}-u"
            reply["external_id"] = f"m{self._counter}-a"
        body = {"user_id": user, "user_message": user_message, "assistant_message": reply}
        return f"/v1/sessions/s-{user}/turns", json.dumps(body).encode()


class Client(Protocol):
    async def post(self, path: str, body: bytes) -> int: ...

    async def aclose(self) -> None: ...


class HttpxClient:
    def __init__(
        self, url: str, *, headers: dict[str, str], connections: int, timeout: float
    ) -> None:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._client = httpx.AsyncClient(
            base_url=url, headers=headers, limits=limits, timeout=timeout
        )

    async def post(self, path: str, body: bytes) -> int:
        return (await self._client.post(path, content=body)).status_code

    async def aclose(self) -> None:
        await self._client.aclose()


_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# uvicorn closes a keep-alive connection after 5 s idle; older idle sockets are not reused.
_IDLE_LIMIT_S = 4.0


class RawClient:
    """Keep-alive HTTP/1.1 POSTs over a pool of asyncio connections (Content-Length bodies)."""

    def __init__(
        self, url: str, *, headers: dict[str, str], connections: int, timeout: float
    ) -> None:
        parts = urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._head = "".join(
            f"{k}: {v}\r\n" for k, v in {"Host": f"{self._host}:{self._port}", **headers}.items()
        ).encode()
        self._idle: list[tuple[_Conn, float]] = []
        self._slots = asyncio.Semaphore(connections)
        self._timeout = timeout

    def _take_idle(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn, since = self._idle.pop()
            if now - since < _IDLE_LIMIT_S:
                return conn
            conn[1].close()
        return None

    async def post(self, path: str, body: bytes) -> int:
        request = (
            f"POST {path} HTTP/1.1\r\n".encode()
            + self._head
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        async with self._slots:
            conn = self._take_idle()
            if conn is not None:
                try:
                    return await self._send(conn, request)
                except (ConnectionError, asyncio.IncompleteReadError):
                    pass  # the server closed it meanwhile: once more on a fresh socket
            conn = await asyncio.open_connection(self._host, self._port)
            return await self._send(conn, request)

    async def _send(self, conn: _Conn, request: bytes) -> int:
        try:
            status, keep = await asyncio.wait_for(self._exchange(conn, request), self._timeout)
        except BaseException:
            conn[1].close()
            raise
        if keep:
            self._idle.append((conn, time.monotonic()))
        else:
            conn[1].close()
        return status

    @staticmethod
    async def _exchange(conn: _Conn, request: bytes) -> tuple[int, bool]:
        reader, writer = conn
        writer.write(request)
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionResetError("closed before the status line")
        status = int(status_line.split(b" ", 2)[1])
        length, keep = 0, True
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                keep = False
        await reader.readexactly(length)
        return status, keep

    async def aclose(self) -> None:
        for (_, writer), _since in self._idle:
            writer.close()
        self._idle.clear()


async def _one(
    client: Client, path: str, body: bytes, scheduled: float, result: PhaseResult
) -> None:
    started = time.perf_counter()
    try:
        status = str(await client.post(path, body))
    except (httpx.HTTPError, OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
        status = type(exc).__name__
    done = time.perf_counter()
    result.statuses[status] = result.statuses.get(status, 0) + 1
    result.latency_ms.append((done - scheduled) * 1000)
    result.service_ms.append((done - started) * 1000)
    result.lag_ms.append((started - scheduled) * 1000)


async def run_phase(
    client: Client, bodies: TurnBodies, *, rate: float, duration_s: float
) -> PhaseResult:
    result = PhaseResult(offered_rate=rate)
    count = max(1, round(rate * duration_s))
    prepared = [bodies.next() for _ in range(count)]
    tasks: list[asyncio.Task[None]] = []
    t0 = time.perf_counter() + 0.05
    for i, (path, body) in enumerate(prepared):
        scheduled = t0 + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_one(client, path, body, scheduled, result)))
    await asyncio.gather(*tasks)
    result.sent = count
    result.duration_s = time.perf_counter() - t0
    return result


async def run(args: argparse.Namespace) -> PhaseResult:
    bodies = TurnBodies(users=args.users, seed=args.seed, external_ids=args.external_ids)
    headers = {"Authorization": f"Bearer {args.key}", "Content-Type": "application/json"}
    kind = RawClient if args.client == "raw" else HttpxClient
    client = kind(args.url, headers=headers, connections=args.connections, timeout=args.timeout)
    try:
        # Warm-up: every user and session exists, connections are open, caches are filled.
        for user in bodies.users:
            path = f"/v1/sessions/s-{user}/turns"
            body = json.dumps(
                {
                    "user_id": user,
                    "user_message": "warming up the session",
                    "assistant_message": "ok",
                }
            ).encode()
            status = await client.post(path, body)
            if status != 202:
                raise RuntimeError(f"warm-up request answered {status}")
        if args.warmup > 0:
            await run_phase(client, bodies, rate=args.rate, duration_s=args.warmup)
        # A full collection here (10-20 ms, measured) would delay completions and be
        # counted as the server's latency: no cyclic GC while measuring (the phase is short).
        gc.collect()
        gc.disable()
        print("MARK measure_start", flush=True)
        result = await run_phase(client, bodies, rate=args.rate, duration_s=args.duration)
        print("MARK measure_end", flush=True)
        gc.enable()
    finally:
        await client.aclose()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loadgen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", required=True, help="API base URL")
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds first")
    parser.add_argument("--users", type=int, default=200, help="users (one session each)")
    parser.add_argument("--connections", type=int, default=256, help="HTTP connection cap")
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--key", default="dev-app-key")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--no-external-ids",
        dest="external_ids",
        action="store_false",
        help="send messages without external_id (no duplicate lookup)",
    )
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    print("RESULT " + json.dumps(asdict(result)), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
