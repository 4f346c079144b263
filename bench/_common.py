"""Shared benchmark plumbing: subprocesses, /proc CPU accounting, databases, text, percentiles."""

from __future__ import annotations

import contextlib
import os
import platform
import random
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from bench.bench_embeddings import chat_sentences

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).parent / "results"
REDIS_URL = "redis://127.0.0.1:6379/14"
POSTGRES_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- machine and results ---------------------------------------------------------------------


def machine_line() -> str:
    """One line naming the machine, so a number is never read without its context."""
    model = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPUs ({model}), {mem_gb:.0f} GiB, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    )


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min) / {five:.2f} (5 min)"


def command_line(prog: str, argv: Sequence[str] | None) -> str:
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join([prog, shlex.join(args)]) if args else prog


def write_results(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"written to {path}", file=sys.stderr)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): the value below which q % of samples lie."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# -- processes -------------------------------------------------------------------------------


def tiermem_command() -> list[str]:
    """The `tiermem` console script of the running venv (or the module when not installed)."""
    script = Path(sys.executable).parent / "tiermem"
    return [str(script)] if script.exists() else [sys.executable, "-m", "services.cli.main"]


def child_env(overrides: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without its TIERMEM_* settings, plus `overrides`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(overrides)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    """A subprocess in its own process group (so its children end with it), logging to a file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> Service:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was not started"
        return self.process.pid

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.process.returncode}; log tail:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, *, grace_s: float = 15.0) -> None:
        """SIGTERM to the group this service leads, then SIGKILL to it after `grace_s`."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Service:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_http(url: str, *, service: Service, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        service.check_alive()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(
        f"{service.name} did not answer {url} within {timeout_s:.0f}s:\n{service.log_tail()}"
    )


def wait_port(port: int, *, service: Service, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        service.check_alive()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{service.name} did not listen on {port} within {timeout_s:.0f}s")


# -- CPU accounting from /proc ---------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid → (parent pid, user + system CPU seconds) for every process readable in /proc."""
    table: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
        # fields[1] is the parent pid; fields[11], fields[12] are utime and stime
        table[int(entry.name)] = (
            int(fields[1]),
            (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS,
        )
    return table


def cpu_seconds(pid: int, table: Mapping[int, tuple[int, float]] | None = None) -> float:
    """user + system CPU of `pid` and its live descendants (all their threads included)."""
    table = _proc_table() if table is None else table
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    total = 0.0
    stack = [pid]
    while stack:
        current = stack.pop()
        if current in table:
            total += table[current][1]
        stack.extend(children.get(current, ()))
    return total


def server_pids() -> dict[str, int]:
    """The local Redis and PostgreSQL servers' main pids (their workers are children), when
    found. Their CPU includes every client's, other people's tests too."""
    found: dict[str, int] = {}
    for pid_file in Path("/var/run/postgresql").glob("*.pid"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            found["postgres"] = int(pid_file.read_text().split()[0])
    table = _proc_table()
    for pid in table:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "redis-server":
                found["redis"] = pid
                break
    return found


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])
    return (total - idle) / _CLOCK_TICKS, total / _CLOCK_TICKS


@dataclass
class CpuSample:
    at: float  # time.monotonic()
    seconds: dict[str, float]  # name → CPU seconds of that process tree
    machine_busy: float
    machine_total: float


def sample_cpu(pids: Mapping[str, int]) -> CpuSample:
    busy, total = machine_busy_seconds()
    table = _proc_table()
    return CpuSample(
        time.monotonic(), {n: cpu_seconds(p, table) for n, p in pids.items()}, busy, total
    )


def cpu_percent(first: CpuSample, last: CpuSample, name: str) -> float:
    """Percent of one core `name` used between two samples (200 % = both cores of two)."""
    wall = last.at - first.at
    return 100 * (last.seconds[name] - first.seconds[name]) / wall if wall > 0 else float("nan")


def machine_percent(first: CpuSample, last: CpuSample) -> float:
    """Percent of the whole machine busy between two samples (100 % = every core)."""
    total = last.machine_total - first.machine_total
    return 100 * (last.machine_busy - first.machine_busy) / total if total > 0 else float("nan")


# -- data stores -----------------------------------------------------------------------------


def flush_redis(url: str = REDIS_URL) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


@contextlib.contextmanager
def postgres_database(prefix: str = "tiermem_bench") -> Iterator[str]:
    """A fresh PostgreSQL database for one run, dropped afterwards; yields its SQLAlchemy URL."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- text ------------------------------------------------------------------------------------

_REPLY_OPENERS = (
    "Good question.",
    "Sure, here is what I would do.",
    "That makes sense.",
    "Thanks for the context.",
    "Here's a short plan.",
    "Happy to help with that.",
)


def user_messages(n: int, *, seed: int, substantive_only: bool = False) -> list[str]:
    """`n` generated user chat messages (see bench.bench_embeddings.chat_sentences)."""
    pool = chat_sentences(n * 2 if substantive_only else n, seed=seed)
    if substantive_only:  # no two-word acks: every turn makes an extraction call
        pool = [s for s in pool if len(s.split()) > 5]
    if len(pool) < n:
        raise ValueError(f"asked for {n} messages, generated {len(pool)}")
    return pool[:n]


def assistant_replies(n: int, *, seed: int) -> list[str]:
    """`n` assistant replies, 1 to 8 sentences long (~60 to ~900 characters), skewed short."""
    rng = random.Random(seed)
    sentences = chat_sentences(4 * n, seed=seed + 1)
    out: list[str] = []
    for _ in range(n):
        count = min(8, 1 + int(rng.expovariate(1 / 2.5)))
        out.append(" ".join([rng.choice(_REPLY_OPENERS), *rng.sample(sentences, count)]))
    return out
