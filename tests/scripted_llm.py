"""A scripted OpenAI-compatible HTTP server (chat, embeddings, models) for tests and benchmarks."""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import hashlib
import json
import math
import random
import re
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from shared.extraction.prompts import ASK_AGAIN_TEMPLATE, VALUE_NOW_TEMPLATE

# How the extractor's follow-up after a reply of dropped items starts (ADR 0031).
ASK_AGAIN_OPENING = ASK_AGAIN_TEMPLATE.splitlines()[0]
# How its question what a known value is now starts (ADR 0032).
VALUE_NOW_OPENING = VALUE_NOW_TEMPLATE.split("$")[0]
MODEL_ID = "scripted-model"
DEFAULT_REPLY = '{"facts": []}'
ECHO = "<echo>"
MALFORMED_REPLY = "Sure! here are the facts: {facts: [oops"
# Valid JSON without the "facts" list the extraction schema requires.
BAD_SCHEMA_REPLY = '{"memories": [{"text": "The user likes tea.", "score": "high"}]}'
MISBEHAVIOURS = (
    "429", "500", "503", "malformed", "timeout", "disconnect", "bad_schema", "html"
)  # fmt: skip
# What a misconfigured proxy or a web server at the wrong URL answers: 200, not JSON.
HTML_BODY = b"<html><body>Welcome to nginx!</body></html>"
_TURN_START = '<user name="'
# A batch prompt (ADR 0024) shows several turns, numbered: <turn n="1" ...> ... </turn>.
_BATCH_START = '<turn n="1"'
_BATCH_TURN = re.compile(r'<turn n="(\d+)"[^>]*>(.*?)</turn>', re.DOTALL)
_STATUS_MODE = re.compile(r"^[45]\d\d$")
# What llama-cpp-python's server answers a json_schema request (HTTP 500): its request model
# only knows "text" and "json_object", and its route handler turns the validation error
# into an internal_server_error.
LLAMA_CPP_JSON_SCHEMA_ERROR = (
    "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
    "'ctx': {'expected': \"'text' or 'json_object'\"}}]"
)
# What OpenAI answers a model without structured outputs (HTTP 400).
OPENAI_JSON_SCHEMA_ERROR = (
    "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
)
# What a server that validates its request strictly answers a schema inside json_object.
UNRECOGNIZED_SCHEMA_ERROR = "Unrecognized request argument supplied: response_format.schema"
_ERROR_TEXT = {
    400: ("invalid_request_error", "Invalid request (scripted)."),
    401: ("invalid_request_error", "Incorrect API key provided (scripted)."),
    403: ("permission_error", "You are not allowed to use this model (scripted)."),
    404: ("invalid_request_error", "The model does not exist (scripted)."),
    429: ("requests", "Rate limit reached for requests (scripted)."),
    500: ("server_error", "The server had an error while processing your request (scripted)."),
    503: ("server_error", "The engine is currently overloaded (scripted)."),
}


@dataclass
class _Misbehaviour:
    mode: str
    remaining: int
    match: str | None
    delay_s: float


class ScriptedLLM:
    """An in-process fake LLM endpoint: scripted replies, injectable failures, recorded requests.

    Requests are served on their own threads, so `latency_s` overlaps across concurrent
    callers the way a real endpoint's does.
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        embedding_dim: int = 384,
        facts_per_turn: int = 0,
        offline_facts: bool = False,
    ) -> None:
        self.latency_s = latency_s
        self.embedding_dim = embedding_dim
        # > 0: unmatched chat requests answer this many valid facts (throughput benchmarks).
        self.facts_per_turn = facts_per_turn
        # True: unmatched chat requests answer the facts tiermem's offline rules find in the
        # turn (recall benchmarks of the LLM path: what it keeps of them is what the path
        # loses, never what a model would find).
        self.offline_facts = offline_facts
        self.requests: list[dict[str, Any]] = []
        # Set: chat requests asking for response_format json_schema fail with this status
        # (500 as llama.cpp's server does, 400 as OpenAI's older models do); json_object works.
        self.json_schema_status: int | None = None
        # Set: a json_object response_format carrying a "schema" (llama.cpp's form) fails
        # with this status, as a server that validates its request strictly answers.
        self.json_object_schema_status: int | None = None
        # Fields left out of every generated fact, as a small model in plain JSON mode
        # does (issue 25: "subject", and optional ones such as "confidence").
        self.leave_out: tuple[str, ...] = ()
        self._scripts: list[tuple[str, dict[str, Any] | list[Any] | str]] = []
        # Answers to the extractor asking again (script_asked_again); none matching, the
        # model answers as it did the first time.
        self._again_scripts: list[tuple[str, dict[str, Any] | list[Any] | str]] = []
        # Answers to the extractor's question what a known value is now (script_value_now).
        self._value_scripts: list[tuple[str, dict[str, Any] | list[Any] | str]] = []
        self._misbehaviours: list[_Misbehaviour] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, port: int = 0, host: str = "127.0.0.1") -> ScriptedLLM:
        if self._server is not None:
            raise RuntimeError("ScriptedLLM is already running")
        self._stopping.clear()
        server = _Server((host, port), _Handler)
        server.llm = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="scripted-llm",
        )
        self._thread.start()
        self.base_url = f"http://{host}:{server.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        # Wakes handlers sleeping in a "timeout" misbehaviour so they exit promptly.
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> ScriptedLLM:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting -------------------------------------------------------------------------

    def script(self, match: str, response: dict[str, Any] | list[Any] | str) -> None:
        """Answer chat requests whose last user message contains `match` with `response`."""
        with self._lock:
            self._scripts.append((match.lower(), response))

    def script_asked_again(self, match: str, response: dict[str, Any] | list[Any] | str) -> None:
        """Answer the extractor's follow-up after a reply whose items were all dropped (ADR
        0031) with `response` when the follow-up contains `match`. Unscripted, a follow-up is
        answered as its turn was: a model that repeats itself."""
        with self._lock:
            self._again_scripts.append((match.lower(), response))

    def script_value_now(self, match: str, response: dict[str, Any] | list[Any] | str) -> None:
        """Answer the extractor's question what a known value is now (ADR 0032), or how the
        person feels about a known liking now, with `response` when the question (it quotes
        the value or the fact, and the turn) contains `match`. Unscripted, the answer is the
        known value (or fact): the turn changed nothing."""
        with self._lock:
            self._value_scripts.append((match.lower(), response))

    def misbehave(
        self, mode: str, *, times: int = 1, match: str | None = None, delay_s: float = 0.0
    ) -> None:
        """Make the next `times` matching chat/embedding requests fail in the given way.

        Modes: "429", "500", "503" (and any other 4xx/5xx code, e.g. "400", "401"),
        "malformed", "timeout" (sleeps `delay_s`, 30 s when 0), "disconnect", "bad_schema",
        "html" (200 whose body is an HTML page, not a JSON API response).
        """
        if mode not in MISBEHAVIOURS and not _STATUS_MODE.match(mode):
            raise ValueError(f"unknown misbehaviour {mode!r}; use one of {MISBEHAVIOURS}")
        if mode == "timeout" and delay_s <= 0:
            delay_s = 30.0
        with self._lock:
            self._misbehaviours.append(
                _Misbehaviour(mode, times, match.lower() if match else None, delay_s)
            )

    def reject_json_schema(self, status: int | None = 500) -> None:
        """Refuse response_format json_schema like a server without structured outputs:
        500 with llama.cpp's validation error, 400 with OpenAI's; None accepts it again."""
        with self._lock:
            self.json_schema_status = status

    def reject_schema_in_json_object(self, status: int | None = 400) -> None:
        """Refuse {"type": "json_object", "schema": ...} (None accepts it again)."""
        with self._lock:
            self.json_object_schema_status = status

    def reset(self) -> None:
        with self._lock:
            self.json_schema_status = None
            self.json_object_schema_status = None
            self.leave_out = ()
            self._scripts.clear()
            self._again_scripts.clear()
            self._value_scripts.clear()
            self._misbehaviours.clear()
            # In place, so a test holding `llm.requests` sees the same list.
            self.requests.clear()

    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def extraction_requests(self) -> list[dict[str, Any]]:
        """The chat requests that are prompts of their own (system and user), not
        follow-ups in a conversation (asked again, what a value is now)."""
        return [r for r in self.chat_requests() if len(r.get("messages") or []) == 2]

    # -- used by the handler ---------------------------------------------------------------

    def _record(self, path: str, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append({**body, "path": path})

    def _take_misbehaviour(self, texts: list[str]) -> _Misbehaviour | None:
        lowered = [t.lower() for t in texts]
        with self._lock:
            for mb in self._misbehaviours:
                if mb.match is None or any(mb.match in t for t in lowered):
                    mb.remaining -= 1
                    if mb.remaining <= 0:
                        self._misbehaviours.remove(mb)
                    return mb
        return None

    def _reply_for_asked_again(self, follow_up: str, turn: str) -> str:
        with self._lock:
            scripts = list(self._again_scripts)
        return _scripted(scripts, follow_up) or self._reply_for(turn)

    def _reply_for_value_now(self, question: str) -> str:
        with self._lock:
            scripts = list(self._value_scripts)
        # Unscripted, nothing changed: the known value, or (asked how the person feels
        # about a liking) the known fact said again, as the real small model does; asked
        # whether the fact is still true, "yes".
        if 'or {"now": "no"}' in question:
            return _scripted(scripts, question) or json.dumps({"now": "yes"})
        known = re.search(r'was "(.*)"\.\n', question) or re.search(
            r"^Known before this turn: (.*)\n", question
        )
        return _scripted(scripts, question) or json.dumps({"now": known.group(1) if known else ""})

    def _reply_for(self, last_user: str) -> str:
        with self._lock:
            scripts = list(self._scripts)
        if (scripted := _scripted(scripts, last_user)) is not None:
            return scripted
        if not (self.offline_facts or self.facts_per_turn > 0):
            return DEFAULT_REPLY
        # A batch's facts are each turn's, numbered as the prompt numbers them.
        turns = _BATCH_TURN.findall(last_user)
        facts = [
            {"turn": int(n), **fact} if turns else fact
            for n, text in (turns or [("1", last_user)])
            for fact in self._generated(text)
        ]
        return json.dumps({"facts": self._left_out(facts)})

    def _generated(self, turn: str) -> list[dict[str, Any]]:
        if self.offline_facts:
            return offline_facts(turn)
        return plausible_facts(turn, self.facts_per_turn)

    def _left_out(self, facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in f.items() if k not in self.leave_out} for f in facts]

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Headroom over the default listen backlog of 5 for benchmarks that connect in bursts.
    request_queue_size = 512
    llm: ScriptedLLM

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn, which can stall on a reverse DNS lookup.
        import socketserver

        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or disconnect on purpose are part of the tests; stay quiet.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints behind httpx pools do
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- routing ---------------------------------------------------------------------------

    def do_GET(self) -> None:
        llm = self.server.llm
        path = self.path.split("?", 1)[0].rstrip("/")
        llm._record(path, {})
        if path.endswith("/models"):
            model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "tiermem-tests"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_error(404, f"no route for GET {path}")

    def do_POST(self) -> None:
        llm = self.server.llm
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            llm._record(path, {"_raw": raw.decode("utf-8", "replace")})
            self._send_error(400, "request body is not JSON")
            return
        if not isinstance(body, dict):
            body = {"_raw": body}
        llm._record(path, body)
        try:
            if path.endswith("/chat/completions"):
                self._chat(body)
            elif path.endswith("/embeddings"):
                self._embeddings(body)
            else:
                self._send_error(404, f"no route for POST {path}")
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout fired first); nothing to answer.
            self.close_connection = True

    # -- endpoints -------------------------------------------------------------------------

    def _chat(self, body: dict[str, Any]) -> None:
        llm = self.server.llm
        messages = body.get("messages") or []
        last_user = _last_user_text(messages)
        model = str(body.get("model") or MODEL_ID)
        if self._rejects_format(body):
            return
        follow_up = _asked_again(messages)
        value_now = _value_now(messages)
        mb = llm._take_misbehaviour([follow_up or value_now or last_user])
        if mb and self._fail(mb):
            return
        llm._sleep(llm.latency_s)
        if mb and mb.mode == "html":
            self._send_raw(200, HTML_BODY, "application/json")
            return
        if mb and mb.mode == "malformed":
            content = MALFORMED_REPLY
        elif mb and mb.mode == "bad_schema":
            content = BAD_SCHEMA_REPLY
        elif value_now is not None:
            content = llm._reply_for_value_now(value_now)
        elif follow_up is not None:
            content = llm._reply_for_asked_again(follow_up, _last_user_text(messages[:-2]))
        else:
            content = llm._reply_for(last_user)
        prompt_tokens = max(1, math.ceil(sum(len(_message_text(m)) for m in messages) / 4))
        completion_tokens = max(1, math.ceil(len(content) / 4))
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream(completion_id, created, model, content, usage if include_usage else None)
            return
        self._send_json(
            200,
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
                "system_fingerprint": "fp_scripted",
            },
        )

    def _stream(
        self, cid: str, created: int, model: str, content: str, usage: dict[str, int] | None
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }

        events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""}, None)]
        step = 16  # several chunks per reply, so a client that drops pieces is caught
        events += [
            chunk({"content": content[i : i + step]}, None) for i in range(0, len(content), step)
        ]
        events.append(chunk({}, "stop"))
        if usage is not None:
            events.append({**chunk({}, None), "choices": [], "usage": usage})
        for event in events:
            self._write_chunk(f"data: {json.dumps(event)}\n\n".encode())
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")  # the terminating zero-length chunk

    def _embeddings(self, body: dict[str, Any]) -> None:
        llm = self.server.llm
        raw_input = body.get("input")
        texts = _embedding_inputs(raw_input)
        mb = llm._take_misbehaviour(texts)
        if mb and self._fail(mb):
            return
        llm._sleep(llm.latency_s)
        if mb and mb.mode in ("malformed", "html"):  # an embedding reply has no "content"
            self._send_raw(200, HTML_BODY, "application/json")
            return
        # bad_schema: vectors of the wrong dimension, which an embedder must refuse.
        dim = 3 if mb and mb.mode == "bad_schema" else llm.embedding_dim
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vector = embed_text(text, dim)
            encoded: Any = (
                base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode() if as_base64 else vector
            )
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens = max(1, math.ceil(sum(len(t) for t in texts) / 4))
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model") or MODEL_ID),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    # -- failure modes ---------------------------------------------------------------------

    def _rejects_format(self, body: dict[str, Any]) -> bool:
        fmt = body.get("response_format")
        schema_status = self.server.llm.json_object_schema_status
        if schema_status is not None and isinstance(fmt, dict) and "schema" in fmt:
            self._send_error(schema_status, UNRECOGNIZED_SCHEMA_ERROR)
            return True
        status = self.server.llm.json_schema_status
        if status is None or not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
            return False
        if status == 500:
            self._send_error(500, LLAMA_CPP_JSON_SCHEMA_ERROR, error_type="internal_server_error")
        else:
            self._send_error(status, OPENAI_JSON_SCHEMA_ERROR)
        return True

    def _fail(self, mb: _Misbehaviour) -> bool:
        """Act out a misbehaviour; True when the response has been dealt with."""
        llm = self.server.llm
        if mb.mode == "timeout":
            llm._sleep(mb.delay_s)
            return False  # then answer normally, long after the client gave up
        if mb.mode == "disconnect":
            self.close_connection = True
            with contextlib.suppress(OSError):  # the client may already be gone
                self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if _STATUS_MODE.match(mb.mode):
            status = int(mb.mode)
            llm._sleep(mb.delay_s)
            headers = {"Retry-After": "0"} if status == 429 else {}
            error_type, message = _ERROR_TEXT.get(status, ("server_error", f"HTTP {status}"))
            code = "rate_limit_exceeded" if status == 429 else None
            self._send_error(status, message, error_type=error_type, code=code, headers=headers)
            return True
        return False  # malformed / bad_schema change the content, not the transport

    # -- writing ---------------------------------------------------------------------------

    def _send_error(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        self._send_json(status, body, headers=headers)

    def _send_json(
        self, status: int, payload: Any, *, headers: dict[str, str] | None = None
    ) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(
        self,
        status: int,
        data: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:16]}")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# -- content helpers -------------------------------------------------------------------------


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _scripted(scripts: list[tuple[str, Any]], text: str) -> str | None:
    """The newest script whose match is in `text`, as the reply's text."""
    lowered = text.lower()
    for match, response in reversed(scripts):
        if match in lowered:
            if response == ECHO:
                return text
            return response if isinstance(response, str) else json.dumps(response)
    return None


def _asked_again(messages: Any) -> str | None:
    """The extractor's follow-up after a reply of dropped items, when the request ends
    with one (after the turn and the model's first answer)."""
    if not isinstance(messages, list) or len(messages) < 4:
        return None
    text = _message_text(messages[-1])
    return text if text.startswith(ASK_AGAIN_OPENING) else None


def _value_now(messages: Any) -> str | None:
    """The extractor's question what a known value is now, when the request ends with one
    (after the turn and the model's answer)."""
    if not isinstance(messages, list) or len(messages) < 4:
        return None
    text = _message_text(messages[-1])
    return text if text.startswith(VALUE_NOW_OPENING) else None


def _last_user_text(messages: Any) -> str:
    """The last user message; of an extraction prompt, its turn (from `<user name=` on):
    the conversation shown before it as context must not match a script of its own."""
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _message_text(message)
            batch = text.find(_BATCH_START)
            turn = batch if batch >= 0 else text.rfind(_TURN_START)
            return text[turn:] if turn >= 0 else text
    return ""


def _embedding_inputs(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        if raw and all(isinstance(x, int) for x in raw):  # one pre-tokenized input
            return [json.dumps(raw)]
        return [x if isinstance(x, str) else json.dumps(x) for x in raw]
    return []


def embed_text(text: str, dim: int) -> list[float]:
    """A deterministic unit vector for `text`: same text, same vector, in every process."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    rng = random.Random(seed)
    vector = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


_TURN_USER = re.compile(r'<user name="([^"]*)">\s*(.*?)\s*</user>', re.DOTALL)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_STOP_WORDS = (
    "about after again also been before being could does doing from have having into just "
    "like more much only other over really some such than that their them then there "
    "these they this those very want were what when where which while will with would "
    "your yours today yesterday tomorrow bought went said think know going started "
    "getting made make takes took"
)
_STOP = frozenset(_STOP_WORDS.split())
_FRIENDS = ("Sam", "Priya", "Marco", "Lena", "Tomás", "Aiko", "Noah", "Zara")
_IDENTITY_ATTRS = ("location", "occupation", "employer", "hometown", "language")


def plausible_facts(last_user: str, n: int) -> list[dict[str, Any]]:
    """`n` schema-valid facts derived from the turn text, cycling through the six types.

    The turn is read from the `<user name="...">` block of the extraction prompt when
    present, so facts name the speaker and differ from turn to turn like real ones.
    """
    found = _TURN_USER.search(last_user)
    name, text = (found.group(1), found.group(2)) if found else ("User", last_user)
    words: list[str] = []
    for word in _WORD.findall(text):
        w = word.lower().strip("'-")
        if w not in _STOP and w not in words:
            words.append(w)
    digest = hashlib.sha256(text.encode()).hexdigest()
    facts: list[dict[str, Any]] = []
    for i in range(n):
        kw = words[i % len(words)] if words else f"topic {digest[i % 60 : i % 60 + 4]}"
        if i >= len(words) > 0:  # more facts than keywords: keep them distinct
            kw = f"{kw} {i // len(words) + 1}"
        base = {
            "subject": name,
            "confidence": round(max(0.5, 0.95 - 0.04 * i), 2),
            "valid_from": None,
            "ended": False,
        }
        kind = i % 6
        if kind == 0:
            fact = {
                "type": "fact",
                "content": f'{name} talked about "{kw}".',
                "attribute": None,
                "value": None,
                "tags": ["conversation"],
            }
        elif kind == 1:
            fact = {
                "type": "preference",
                "content": f"{name} likes {kw}.",
                "topic": kw,
                "sentiment": "likes",
                "value": kw,
                "tags": ["preference"],
            }
        elif kind == 2:
            fact = {
                "type": "goal",
                "content": f"{name} wants to learn more about {kw}.",
                "goal": f"learn more about {kw}",
                "target_date": None,
                "status": "active",
                "tags": ["learning"],
            }
        elif kind == 3:
            fact = {
                "type": "decision",
                "content": f"{name} decided to focus on {kw}.",
                "topic": kw,
                "choice": f"focus on {kw}",
                "reason": None,
                "tags": ["plans"],
            }
        elif kind == 4:
            friend = _FRIENDS[int(digest[i % 60 : i % 60 + 2], 16) % len(_FRIENDS)]
            fact = {
                "type": "relationship",
                "content": f"{name} has a friend named {friend} who is into {kw}.",
                "person": friend,
                "relation": "friend",
                "tags": ["people"],
            }
        else:
            attr = _IDENTITY_ATTRS[(i // 6) % len(_IDENTITY_ATTRS)]
            fact = {
                "type": "identity",
                "content": f"{name}'s {attr} is {kw}.",
                "attribute": attr,
                "value": kw,
                "tags": ["identity"],
            }
        facts.append({**base, **fact})
    return facts


_SESSION_DATE = re.compile(r"Session date: (\d{4}-\d{2}-\d{2})")


def offline_facts(last_user: str) -> list[dict[str, Any]]:
    """The facts tiermem's offline extractor finds in the extraction prompt's turn (its
    `<user>` block, the person's name and the session date), as an LLM would answer them."""
    from shared.config import ExtractionSettings
    from shared.extraction.base import TurnInput
    from shared.extraction.offline import OfflineExtractor

    found, day = _TURN_USER.search(last_user), _SESSION_DATE.search(last_user)
    if found is None:
        return []
    when = dt.datetime.fromisoformat(day.group(1)) if day else dt.datetime.now(dt.UTC)
    turn = TurnInput(
        user_message=found.group(2),
        assistant_message=None,
        session_date=when.replace(tzinfo=dt.UTC, hour=12),
        user_speaker=found.group(1),
    )
    result = OfflineExtractor(ExtractionSettings()).extract(turn)
    return [f.model_dump(mode="json") for f in result.facts]


# -- pytest fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def scripted_llm_server() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def scripted_llm(scripted_llm_server: ScriptedLLM) -> ScriptedLLM:
    from shared.llm.formats import FALLBACKS

    # Every test talks to the same base_url: what one test's server refused must not
    # send the next test's calls straight to json_object.
    FALLBACKS.clear()
    scripted_llm_server.reset()
    scripted_llm_server.latency_s = 0.0
    scripted_llm_server.facts_per_turn = 0
    return scripted_llm_server


# -- CLI -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.scripted_llm",
        description="Run the scripted OpenAI-compatible server.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8911)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every reply")
    parser.add_argument("--embedding-dim", type=int, default=384)
    parser.add_argument(
        "--offline-facts",
        action="store_true",
        help="unmatched chat requests answer the facts tiermem's offline rules find in the turn",
    )
    parser.add_argument(
        "--facts-per-turn",
        type=int,
        default=0,
        help="unmatched chat requests answer N valid facts derived from the turn",
    )
    args = parser.parse_args(argv)
    llm = ScriptedLLM(
        latency_s=args.latency,
        embedding_dim=args.embedding_dim,
        facts_per_turn=args.facts_per_turn,
        offline_facts=args.offline_facts,
    ).start(port=args.port, host=args.host)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(
        f"scripted LLM at {llm.base_url} (latency {args.latency}s, "
        f"facts/turn {args.facts_per_turn})",
        flush=True,
    )
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        llm.stop()


if __name__ == "__main__":
    main()
