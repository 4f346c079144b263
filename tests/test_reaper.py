"""A test run killed from outside leaves no process of its tests running (tests.processes).

A pytest of its own runs a test that starts a real `tiermem serve` (tests.factories'
`tiermem_serve`), a child that starts a grandchild, and a child started from a worker
thread (which gets no parent-death signal: only the reaper stops it); once they all run,
that pytest is killed with SIGKILL, alone or with its whole process group, as the OOM
killer or a CI timeout would. Nothing it started may survive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import processes
from tests.factories import wait_for

INNER = textwrap.dedent(
    """
    import os, sys, threading, time
    from pathlib import Path
    from tests import processes
    from tests.factories import tiermem_serve

    SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
    PARENT = [sys.executable, "-c",
              "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)",
              *SLEEP]


    def test_holds_processes(tmp_path: Path) -> None:
        with tiermem_serve(tmp_path):
            processes.spawn(PARENT)
            from_thread = threading.Thread(target=processes.spawn, args=(SLEEP,))
            from_thread.start()
            from_thread.join()
            time.sleep(2)  # the grandchild is started
            Path(os.environ["INNER_READY"]).touch()
            time.sleep(600)
    """
)


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                raw = Path(f"/proc/{entry.name}/stat").read_bytes()
            except OSError:
                continue
            parents[int(entry.name)] = int(raw[raw.rindex(b")") + 2 :].split()[1])
    found = {pid}
    grew = True
    while grew:
        new = {child for child, parent in parents.items() if parent in found} - found
        found |= new
        grew = bool(new)
    return found - {pid}


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


def _alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2 :].split()[0] != b"Z"  # a zombie has stopped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("kill", ["pytest", "its process group"])
def test_what_a_killed_run_started_is_stopped(tmp_path: Path, kill: str) -> None:
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER)
    ready = tmp_path / "ready"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    with (tmp_path / "inner.log").open("wb") as log:
        run = processes.spawn(
            [*command, f"--basetemp={tmp_path / 'inner-tmp'}", str(inner)],
            env={**os.environ, "INNER_READY": str(ready)},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=processes.REPO,
        )
    started: set[int] = set()
    try:
        wait_for(
            lambda: ready.exists() or run.poll() is not None,
            timeout=120,
            what="the inner test to start its processes",
        )
        assert run.poll() is None, (tmp_path / "inner.log").read_text()
        started = _descendants(run.pid)
        commands = " ".join(Path(f"/proc/{p}/cmdline").read_text() for p in started)
        # the reaper, `tiermem serve`, a sleeper and its child, the worker thread's sleeper
        assert len(started) >= 5 and "serve" in commands and "tests.processes" in commands
        if kill == "pytest":
            os.kill(run.pid, signal.SIGKILL)
        else:
            os.killpg(run.pid, signal.SIGKILL)  # spawn made it a group leader
        run.wait()
        try:
            # SIGKILL is at once; the reaper notices pytest's death within a second, which
            # on 2 busy cores at the end of the whole suite once took longer than 30 s.
            wait_for(
                lambda: not any(_alive(p) for p in started),
                timeout=90,
                what="every process of the killed run to stop",
            )
        except AssertionError as exc:
            survivors = {p: _command(p) for p in started if _alive(p)}
            raise AssertionError(f"{exc}; still running: {survivors}") from None
    finally:  # whatever the assertions found, this test leaves nothing behind either
        if run.poll() is None:
            started |= _descendants(run.pid)
            run.kill()
            run.wait()
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
