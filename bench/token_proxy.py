"""A token-counting proxy in front of an OpenAI-compatible server, for benchmarks that put
two memory systems through the same model and count what each one asked of it.

    with TokenProxy("http://127.0.0.1:8765/v1") as proxy:
        mark = proxy.mark()
        ...  # point a client at proxy.base_url
        calls = proxy.calls_since(mark)

Every request is forwarded as it came (method, path, body, content type, authorization) and
answered with what the upstream answered. Each POST to `…/chat/completions` is recorded as a
`Call`: its HTTP status, the `usage` the upstream reported (prompt and completion tokens, by
the server's own tokenizer), the `response_format` it asked for, its seconds, and for an
error the start of the body. A refusal for length (llama-cpp-python: "…you requested N
tokens (P in the messages, C in the completion)") keeps P, the prompt the server counted
before refusing. Streams are not counted (neither client measured here streams).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx

ERROR_CHARS = 300
# llama-cpp-python's answer to a prompt longer than its context (server/errors.py), and
# llama.cpp's own wording.
_REFUSED_PROMPT = (
    re.compile(r"(\d+) in the messages"),
    re.compile(r"Requested tokens \((\d+)\) exceed context window"),
    re.compile(r"request \((\d+) tokens\) exceeds the available context"),
)
_FORWARDED_HEADERS = ("content-type", "authorization", "accept")


@dataclass(frozen=True)
class Call:
    """One chat completion as the proxy saw it."""

    status: int
    seconds: float
    prompt_tokens: int  # 0 when the upstream reported no usage (an error)
    completion_tokens: int
    response_format: str | None  # the type asked for ("json_object+schema" with a schema)
    error: str | None = None  # the start of an error body
    refused_prompt_tokens: int | None = None  # the prompt a length refusal counted

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def refused_prompt_tokens(text: str) -> int | None:
    """The prompt tokens a server names when it refuses a request for its length."""
    for pattern in _REFUSED_PROMPT:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


def format_asked(body: dict[str, Any]) -> str | None:
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return None
    kind = str(fmt.get("type"))
    return f"{kind}+schema" if kind == "json_object" and "schema" in fmt else kind


def read_call(status: int, seconds: float, request: dict[str, Any], reply: bytes) -> Call:
    """The Call a chat completion request and its upstream reply make."""
    fmt = format_asked(request)
    try:
        data = json.loads(reply)
    except ValueError:
        data = None
    usage = data.get("usage") if isinstance(data, dict) else None
    if 200 <= status < 300 and isinstance(usage, dict):
        return Call(
            status,
            seconds,
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            fmt,
        )
    text = reply.decode("utf-8", "replace")
    error = text[:ERROR_CHARS] if not 200 <= status < 300 else f"no usage in the reply: {text}"
    return Call(status, seconds, 0, 0, fmt, error[:ERROR_CHARS], refused_prompt_tokens(text))


class TokenProxy:
    """Serves on 127.0.0.1 (a free port) in a thread; `base_url` replaces the upstream's."""

    def __init__(self, upstream: str, *, timeout_s: float = 900.0) -> None:
        parts = urlsplit(upstream.rstrip("/"))
        self.upstream_origin = f"{parts.scheme}://{parts.netloc}"
        self.prefix = parts.path  # "/v1": kept, so the proxy's URLs mirror the upstream's
        self.base_url = ""
        self._client = httpx.Client(timeout=timeout_s)
        self._calls: list[Call] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> TokenProxy:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.proxy = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
            name="token-proxy",
        )  # fmt: skip
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}{self.prefix}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None
        self._client.close()

    def __enter__(self) -> TokenProxy:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def mark(self) -> int:
        """A point in the record: `calls_since(mark)` is what came after it."""
        with self._lock:
            return len(self._calls)

    def calls_since(self, mark: int) -> list[Call]:
        with self._lock:
            return self._calls[mark:]

    def _record(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) of the upstream's answer; a chat completion is
        recorded. An upstream that cannot be reached is answered 502 (and recorded)."""
        counted = method == "POST" and path.split("?", 1)[0].rstrip("/").endswith(
            "/chat/completions"
        )
        started = time.perf_counter()
        try:
            reply = self._client.request(
                method, self.upstream_origin + path, headers=headers, content=body
            )
            status, kind, content = (
                reply.status_code, reply.headers.get("content-type", ""), reply.content
            )  # fmt: skip
        except httpx.HTTPError as exc:
            status, kind = 502, "application/json"
            message = f"token proxy: upstream unreachable: {type(exc).__name__}: {exc}"
            content = json.dumps({"error": {"message": message, "type": "proxy_error"}}).encode()
        if counted:
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                request = {}
            request = request if isinstance(request, dict) else {}
            self._record(read_call(status, time.perf_counter() - started, request, content))
        return status, kind, content


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: TokenProxy

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn, which can stall on a reverse DNS lookup.
        import socketserver

        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the clients' httpx pools expect
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._relay("GET")

    def do_POST(self) -> None:
        self._relay("POST")

    def _relay(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() in _FORWARDED_HEADERS}
        status, kind, content = self.server.proxy.forward(method, self.path, headers, body)
        self.send_response(status)
        self.send_header("Content-Type", kind or "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)
