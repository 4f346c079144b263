"""Peak memory of a command and every process it starts (the test suite's, issue 24).

`/usr/bin/time -v` reports one process's max RSS; the suite's cost is the pytest process
plus every `tiermem serve`, `celery worker`, browser and server a test starts, at the same
moment. This samples the sum of their RSS once a second:

    python -m bench.suite_memory -- .venv/bin/python -m pytest -q          # one run
    python -m bench.suite_memory --each-module tests/api tests/e2e          # one run per file

A process belongs to the run from the moment it is seen as a descendant of the command,
and stays counted after its parent dies (reparented to init), until it exits: a server
whose test forgot it is still the run's memory. Whatever of it is still alive when the
command has exited is reported as left behind, and stopped. The command runs with its
output passed through; the last line it printed at the peak sample says roughly which
test was running (run pytest with -v for that).

Sum of RSS counts pages shared between processes (a forked child's, shared libraries)
once per process, so it is an upper bound; the sum of PSS, which splits them, is given
beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._common import REPO, load_average, machine_line

PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 2**20

# A process is known by its pid and its start time, so a reused pid is not mistaken for it.
Key = tuple[int, int]


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks), or None once the process is gone or has
    exited (a zombie holds no memory and waits only for its parent to read its status)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    if fields[0] == b"Z":
        return None
    return int(fields[1]), int(fields[19])


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


@dataclass
class Sample:
    at: float
    rss: int
    pss: int
    processes: int
    top: list[tuple[int, str]]  # (rss, command line) of the biggest few
    last_line: str


@dataclass
class Tree:
    """The processes of one run: the root and everything seen below it since."""

    root: int
    members: dict[Key, str] = field(default_factory=dict)

    def refresh(self) -> list[int]:
        """Pids of the run's processes alive now."""
        parents: dict[int, int] = {}
        started: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = _stat(int(entry.name))
                if stat is not None:
                    parents[int(entry.name)], started[int(entry.name)] = stat
        alive = {pid for pid, start in self.members if started.get(pid) == start}
        if self.root in started:
            alive.add(self.root)
        # Descendants of any member, also of one reparented after its parent died.
        grew = True
        while grew:
            grew = False
            for pid, parent in parents.items():
                if parent in alive and pid not in alive:
                    alive.add(pid)
                    grew = True
        for pid in alive:
            key = (pid, started[pid])
            if key not in self.members:
                self.members[key] = _cmdline(pid)
        return sorted(alive)


@dataclass
class Run:
    command: list[str]
    samples: list[Sample]
    seconds: float
    returncode: int
    left_behind: list[str]
    processes_seen: int

    @property
    def peak(self) -> Sample:
        return max(self.samples, key=lambda s: s.rss, default=Sample(0, 0, 0, 0, [], ""))


def measure(command: Sequence[str], *, interval: float = 1.0, echo: bool = True) -> Run:
    """Run `command` to its end, sampling its process tree's memory every `interval` s."""
    started = time.monotonic()
    # Its own session: the sampler's terminal signals do not reach it, and what it leaves
    # behind can be stopped as one group as well as one by one.
    process = subprocess.Popen(
        list(command),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    tree = Tree(process.pid)
    last_line = [""]

    def pump() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            if line.strip():
                last_line[0] = line.strip()[:160]
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    samples: list[Sample] = []
    while process.poll() is None:
        pids = tree.refresh()
        sizes = sorted(((_rss(pid), pid) for pid in pids), reverse=True)
        samples.append(
            Sample(
                at=time.monotonic() - started,
                rss=sum(size for size, _ in sizes),
                pss=sum(_pss(pid) for pid in pids),
                processes=len(pids),
                top=[(size, _cmdline(pid)) for size, pid in sizes[:5]],
                last_line=last_line[0],
            )
        )
        time.sleep(interval)
    reader.join(timeout=5)
    seconds = time.monotonic() - started
    left = [pid for pid in tree.refresh() if pid != process.pid]
    left_behind = [f"{pid} {_cmdline(pid)}" for pid in left]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return Run(list(command), samples, seconds, process.returncode, left_behind, len(tree.members))


def _mb(size: int) -> str:
    return f"{size / MB:,.0f} MB"


def report(run: Run) -> str:
    peak = run.peak
    lines = [
        f"command: {' '.join(run.command)}",
        f"exit {run.returncode} after {run.seconds:.0f} s, {len(run.samples)} samples",
        f"peak RSS sum {_mb(peak.rss)} (PSS sum {_mb(peak.pss)}) over {peak.processes} "
        f"processes at {peak.at:.0f} s",
        f"  last output line then: {peak.last_line}",
    ]
    lines += [f"  {_mb(size):>9}  {cmd}" for size, cmd in peak.top]
    lines.append(f"processes in the run: {run.processes_seen}")
    if run.left_behind:
        lines.append(f"LEFT BEHIND (killed now): {len(run.left_behind)}")
        lines += [f"  {entry}" for entry in run.left_behind]
    return "\n".join(lines)


def write_timeline(run: Run, path: Path) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f, delimiter="\t")
        out.writerow(["s", "rss_mb", "pss_mb", "processes", "last_line"])
        for sample in run.samples:
            rss, pss = round(sample.rss / MB), round(sample.pss / MB)
            out.writerow([round(sample.at), rss, pss, sample.processes, sample.last_line])


def test_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for path in map(Path, paths):
        found = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
        files += found
    return files


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument(
        "--each-module",
        nargs="+",
        metavar="PATH",
        help="run pytest once per test file under these paths; print a table, worst first",
    )
    parser.add_argument("--quiet", action="store_true", help="do not echo the command's output")
    parser.add_argument(
        "--timeline", type=Path, help="write every sample (s, MB, processes, output line) here"
    )
    parser.add_argument("command", nargs="*", help="the command to measure (after --)")
    args = parser.parse_args(argv)
    print(f"machine: {machine_line()}; load {load_average()}", flush=True)
    if not args.each_module:
        if not args.command:
            parser.error("give a command after --, or --each-module")
        run = measure(args.command, interval=args.interval, echo=not args.quiet)
        print(report(run))
        if args.timeline:
            write_timeline(run, args.timeline)
        sys.exit(run.returncode)
    rows: list[tuple[int, int, float, str, str, int, int]] = []
    for path in test_files(args.each_module):
        # -v: the line printed last before the peak names the test running then.
        command = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", str(path)]
        run = measure(command, interval=args.interval, echo=not args.quiet)
        print(report(run), flush=True)
        peak = run.peak
        rows.append(
            (
                peak.rss,
                peak.pss,
                run.seconds,
                str(path),
                peak.top[0][1] if peak.top else "",
                len(run.left_behind),
                run.returncode,
            )
        )
    print("\n| module | peak RSS sum | PSS sum | s | exit | left behind | biggest process |")
    print("|---|---|---|---|---|---|---|")
    for rss, pss, seconds, module, biggest, left, code in sorted(rows, reverse=True):
        cells = [module, _mb(rss), _mb(pss), f"{seconds:.0f}", str(code), str(left), biggest]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
