"""Headless Chromium driven over the DevTools protocol: a page is opened, keys are pressed
and JavaScript is evaluated in it, for tests that use a page the way a person does (the
keyboard, buttons, a dialog) rather than only reading what it drew."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import websockets

from tests import processes
from tests.ops.test_ops_page import CHROMIUM, FLAGS

# Input.dispatchKeyEvent's fields per key a test presses.
KEYS = {
    "Tab": {"key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9},
    "Enter": {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"},
    "Space": {"key": " ", "code": "Space", "windowsVirtualKeyCode": 32, "text": " "},
}


FOCUSED = """(() => {
  const e = document.activeElement;
  const id = e.id ? "#" + e.id : e.dataset.user ? `[data-user=${e.dataset.user}]` : "";
  return e.tagName.toLowerCase() + id + " " + (e.textContent || "").trim().slice(0, 40);
})()"""


class Page:
    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:  # events arrive in between; the answer carries our id
            message = json.loads(await self.socket.recv())
            if message.get("id") == call_id:
                assert "error" not in message, message
                result: dict[str, Any] = message["result"]
                return result

    async def js(self, expression: str) -> Any:
        """The value of `expression` (a promise is awaited), as JSON."""
        answer = await self.send(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"].get("value")

    async def wait(self, expression: str, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while not (value := await self.js(expression)):
            assert time.monotonic() < deadline, (
                f"timed out after {timeout}s waiting for {expression}"
            )
            await asyncio.sleep(0.2)
        return value

    async def goto(self, url: str) -> None:
        # Through a blank page: a new fragment alone would not load the page again (the tab's
        # sessionStorage stays, as when a person opens another link in it).
        await self.send("Page.navigate", url="about:blank")
        await self.wait("location.href === 'about:blank' && document.readyState === 'complete'")
        await self.send("Page.navigate", url=url)
        path = json.dumps(urlsplit(url).path)
        await self.wait(f"location.pathname === {path} && document.readyState === 'complete'")

    async def press(self, key: str, times: int = 1) -> None:
        for _ in range(times):
            for kind in ("keyDown", "keyUp"):
                fields = (
                    KEYS[key]
                    if kind == "keyDown"
                    else {k: v for k, v in KEYS[key].items() if k != "text"}
                )
                await self.send("Input.dispatchKeyEvent", type=kind, **fields)

    async def type(self, text: str) -> None:
        await self.send("Input.insertText", text=text)

    async def focused(self) -> str:
        """The focused element as `tag#id` or `tag[data-…]` and its words."""
        description: str = await self.js(FOCUSED)
        return description


@asynccontextmanager
async def open_page(tmp: Path, width: int = 1280, height: int = 1000) -> AsyncIterator[Page]:
    """A headless Chromium with one blank page, driven over its DevTools socket."""
    assert CHROMIUM, "Debian's chromium package is needed (.ci/run installs it)"
    profile = tmp / "devtools-profile"
    browser = processes.spawn(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            f"--window-size={width},{height}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.exists() and active.read_text().strip()):
            assert browser.poll() is None, "chromium exited"
            assert time.monotonic() < deadline, "chromium opened no DevTools port"
            await asyncio.sleep(0.1)
        port = active.read_text().split()[0]
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(t for t in targets if t["type"] == "page")
        async with websockets.connect(page["webSocketDebuggerUrl"], max_size=None) as socket:
            yield Page(socket)
    finally:  # the browser and its renderers: spawn gave them a process group of their own
        with contextlib.suppress(ProcessLookupError):
            os.killpg(browser.pid, signal.SIGKILL)
        browser.wait(timeout=30)
