"""A real webhook receiver for the tests: an HTTP server on 127.0.0.1 that checks each
delivery's Standard Webhooks signature by the spec (written out here, not the signer's
library) and records it, then answers as its mode says.

In a thread of the test (`Receiver(...).start()`), or as a process of its own that a drill
can kill (`python -m tests.webhook_receiver PORT LOG SECRETS_JSON MODE`). Either way each
delivery is one JSON line in the log, written when it arrives (before any answer), and
`POST /_mode {"mode": ..., "delay": ...}` changes the mode:
  ok: 200 · fail: 500 · slow: 200 after `delay` seconds · hang: no answer for an hour.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx


def signature_valid(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The spec's check: HMAC-SHA256 over '{id}.{timestamp}.{body}', keyed by the base64
    after whsec_, base64 in a 'v1,' entry of the space-separated webhook-signature;
    the timestamp within five minutes."""
    msg_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature", "")
    if not msg_id or not stamp or abs(time.time() - int(stamp)) > 300:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    for entry in signatures.split(" "):
        version, _, value = entry.partition(",")
        if version == "v1" and hmac.compare_digest(base64.b64decode(value), expected):
            return True
    return False


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *_: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/_mode":
            change = json.loads(body)
            self.server.mode = change["mode"]
            self.server.delay = float(change.get("delay", self.server.delay))
            self._answer(200)
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        secret = self.server.secrets.get(self.path)
        event = json.loads(body)
        mode = self.server.mode
        self.server.record(
            {
                "path": self.path,
                "id": headers.get("webhook-id"),
                "valid": secret is not None and signature_valid(secret, headers, body),
                "type": event.get("type"),
                "data": event.get("data"),
                "mode": mode,
                "at": time.time(),
            }
        )
        if mode == "fail":
            self._answer(500)
        elif mode in ("slow", "hang"):
            time.sleep(self.server.delay if mode == "slow" else 3600)
            self._answer(200)
        else:
            self._answer(200)

    def _answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, log: Path, secrets: dict[str, str], mode: str) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.log, self.secrets, self.mode, self.delay = log, secrets, mode, 5.0
        self._lock = threading.Lock()

    def record(self, line: dict[str, Any]) -> None:
        with self._lock, self.log.open("a") as out:
            out.write(json.dumps(line) + "\n")


class Receiver:
    """The receiver in a thread of this process."""

    def __init__(self, port: int, log: Path, secrets: dict[str, str], mode: str = "ok") -> None:
        self.server = _Server(port, log, secrets, mode)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def received(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def set_mode(port: int, mode: str, delay: float | None = None) -> None:
    change: dict[str, Any] = {"mode": mode} | ({"delay": delay} if delay is not None else {})
    httpx.post(f"http://127.0.0.1:{port}/_mode", json=change, timeout=5).raise_for_status()


if __name__ == "__main__":
    port, log, secrets, mode = sys.argv[1:5]
    _Server(int(port), Path(log), json.loads(secrets), mode).serve_forever()
