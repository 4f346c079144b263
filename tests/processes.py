"""Processes the tests start, and the reaper that stops them when pytest dies before they do.

A test stops what it starts in its own `finally`, but a run killed from outside (the OOM
killer, `kill -9`, a CI timeout) runs no `finally`: a `tiermem serve` it had started kept
running, holding its port, its folder lock and ~400 MB (issue 24). So every process a
test starts goes through `spawn` or `run` here, which

- start it as the leader of its own process group, so what it starts in turn (a prefork
  pool, a browser's helpers) is stopped with it by one `killpg`;
- give it PR_SET_PDEATHSIG (Linux): the kernel kills it the moment the thread that
  started it dies. Only for the main thread's children, since a worker thread of the
  suite ending would otherwise take its children with it;
- name its group to the reaper, a small process of its own session (a signal sent to
  pytest's process group does not reach it) that watches pytest: when pytest is gone,
  however it went, the reaper kills every group it was told of that is still alive.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Looked up here, not in the child: between fork and exec nothing should load a library.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None

_reaper: subprocess.Popen[bytes] | None = None
_reaper_lock = threading.Lock()


def spawn(args: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """subprocess.Popen, supervised as above."""
    return subprocess.Popen(list(args), **_supervised(popen))


def run(args: Sequence[str], **options: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run, supervised as above."""
    return subprocess.run(list(args), **_supervised(options))


def _supervised(options: dict[str, Any]) -> dict[str, Any]:
    reaper_fd = _reaper_stdin()
    parent = os.getpid()
    prctl = _PRCTL if threading.current_thread() is threading.main_thread() else None

    # Runs in the child between fork and exec, where little is safe: a call through a
    # function already loaded, a small write. The write is atomic (under PIPE_BUF), so
    # children started at once from several threads never mix their lines.
    def in_child() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the signal was armed
                os.kill(os.getpid(), signal.SIGKILL)
        os.write(reaper_fd, b"%d\n" % os.getpid())

    return {"process_group": 0, "preexec_fn": in_child, **options}


def _reaper_stdin() -> int:
    global _reaper
    with _reaper_lock:
        if _reaper is None or _reaper.poll() is not None:
            _reaper = subprocess.Popen(
                [sys.executable, "-m", "tests.processes", str(os.getpid())],
                stdin=subprocess.PIPE,
                cwd=REPO,
                start_new_session=True,
            )
            atexit.register(_stop_reaper, _reaper)
        assert _reaper.stdin is not None
        return _reaper.stdin.fileno()


def _stop_reaper(reaper: subprocess.Popen[bytes]) -> None:
    """At a normal exit: the reaper stops what a test left running, and says so."""
    assert reaper.stdin is not None
    reaper.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        reaper.wait(timeout=15)


# -- the reaper's side: `python -m tests.processes <pytest pid>` ------------------------------


def _ticks_now() -> int:
    with open("/proc/uptime") as f:
        uptime = Decimal(f.read().split()[0])
    # Exactly: as a float, 12345.67 * 100 is 1234566.99… and truncates a tick early (6 % of
    # readings), so a group told in the tick its leader started looked like a reused pid
    # and was left running (tests/test_reaper.py failed once in CI).
    return int(uptime * _CLOCK_TICKS)


def _started(pid: int) -> int | None:
    """The process's start time in clock ticks after boot; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return int(raw[raw.rindex(b")") + 2 :].split()[19])


def _reap(groups: dict[int, int]) -> None:
    """Kill each group still alive. A group is known by its leader's pid; when that pid now
    names a process started after it was told (the number was reused), it is not ours."""
    for pgid, told_at in groups.items():
        leader = _started(pgid)
        if leader is not None and leader > told_at:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            print(f"tests.processes: stopped process group {pgid} left running", file=sys.stderr)


def _watch(pytest_pid: int) -> None:
    # Its own session already keeps terminal and group signals away; SIGTERM still reaps.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    groups: dict[int, int] = {}
    pending = b""
    try:
        # EOF when pytest closes the pipe or dies; a process pytest forked without exec
        # could hold the pipe open after it, so pytest's own death is checked each second.
        while os.getppid() == pytest_pid:
            ready, _, _ = select.select([sys.stdin.buffer], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(sys.stdin.fileno(), 4096)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                groups[int(line)] = _ticks_now()
            # A group whose processes are all gone needs no watching (and its id may be
            # reused): forget it, so the table stays small over a long run.
            for pgid in [g for g in groups if not _group_alive(g)]:
                del groups[pgid]
    finally:
        _reap(groups)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


if __name__ == "__main__":
    _watch(int(sys.argv[1]))
