"""Context, ingest and extraction benchmarks of two commits, side by side in one run.

    python -m bench.compare_refs BASE HEAD [--rounds 2] [--quick]

Each ref is checked out into its own detached worktree under a temporary folder and runs
its OWN bench modules (an older commit's benches import the modules that existed then),
with PYTHONPATH set to that worktree and the same venv python (`--python`). The runs are
interleaved (round 1: context BASE, context HEAD, ingest BASE, ingest HEAD, extraction
BASE, extraction HEAD; round 2 the same ...), so load drifting on a shared machine hits
both refs alike; compare the ratios, not the absolute numbers.

- context: scenario (a) only (1 user, 1,000 facts, 2,000 earlier messages), no mem0, no
  prompt sizes, no A/B switches; build_context wall and thread-CPU p50/p95, search_memories p50.
- ingest: SQLite only, open loop at 200 requests/s (Redis db 14, the bench's default).
- extraction: SQLite, one threads worker at -c 32 against the scripted LLM (Redis db 9).

Every output (results, logs, worlds, embedding caches) goes to the temporary folder, never
into the repository; the worktrees and the folder are removed at the end (`--keep` keeps
them). The default takes about 15-20 minutes on a 2-core machine, `--quick` about 5.
Prints one markdown table: each metric's median over the rounds per ref and HEAD/BASE.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXTRACTION_REDIS_URL = "redis://127.0.0.1:6379/9"
RUN_TIMEOUT_S = 20 * 60.0

Metrics = dict[str, float]


@dataclass(frozen=True)
class Sizes:
    context_queries: int
    context_profile_queries: int
    ingest_duration_s: int
    extraction_turns: int


# On 2 shared cores: FULL ≈ 17 min for 2 rounds (6d6076e against 81aa000 took 10.6 min with
# 500 queries, 60 s and 1,200 turns), QUICK ≈ 5 min.
FULL = Sizes(
    context_queries=2000, context_profile_queries=20, ingest_duration_s=90, extraction_turns=1800
)
QUICK = Sizes(
    context_queries=100, context_profile_queries=10, ingest_duration_s=15, extraction_turns=300
)


# -- the three benches -----------------------------------------------------------------------


def context_args(sizes: Sizes, out: Path, scratch: Path) -> list[str]:
    return [
        "--scenarios", "a",
        "--queries", str(sizes.context_queries),
        "--profile-queries", str(sizes.context_profile_queries),
        "--warmup", "20",
        "--prompt-sizes", "",
        "--switch-queries", "0",
        "--no-mem0",
        "--embed-cache", str(scratch / "context-embeddings.npz"),  # kept between rounds
        "--workdir", str(scratch),
        "--out", str(out),
    ]  # fmt: skip


def ingest_args(sizes: Sizes, out: Path, scratch: Path) -> list[str]:
    return [
        "--backends", "sqlite",
        "--rate", "200",
        "--duration", str(sizes.ingest_duration_s),
        "--warmup", "5",
        "--logs", str(scratch / "logs"),
        "--out", str(out),
    ]  # fmt: skip


def extraction_args(sizes: Sizes, out: Path, scratch: Path, redis_url: str) -> list[str]:
    return [
        "--backends", "sqlite",
        "--concurrency", "32",
        "--turns", str(sizes.extraction_turns),
        "--redis-url", redis_url,
        "--logs", str(scratch / "logs"),
        "--out", str(out),
    ]  # fmt: skip


def _number(cell: str) -> float:
    """The first number in a table cell ('43 ms', '20.5 (timed out)', '1,516')."""
    found = re.search(r"-?\d[\d,]*(?:\.\d+)?", cell)
    if found is None:
        raise ValueError(f"no number in {cell!r}")
    return float(found.group().replace(",", ""))


def markdown_tables(text: str) -> Iterator[list[dict[str, str]]]:
    """Every markdown table in `text`, as rows keyed by the header's cells."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if not (line.startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1])):
            continue
        header = [c.strip() for c in line.strip("|").split("|")]
        rows = []
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            rows.append(
                dict(zip(header, (c.strip() for c in row.strip("|").split("|")), strict=False))
            )
        yield rows


def _table_with(text: str, *columns: str) -> list[dict[str, str]]:
    for rows in markdown_tables(text):
        if rows and all(c in rows[0] for c in columns):
            return rows
    raise ValueError(f"no table with columns {columns} in the bench's output")


def parse_context(report: str, log: str) -> Metrics:
    wall = _table_with(report, "scenario", "queries", "p50 ms", "p95 ms")[0]
    cpu = _table_with(report, "scenario", "CPU p50 ms", "CPU p95 ms")[0]
    metrics = {
        "context (a): build_context p50 ms": _number(wall["p50 ms"]),
        "context (a): build_context p95 ms": _number(wall["p95 ms"]),
        "context (a): build_context thread CPU p50 ms": _number(cpu["CPU p50 ms"]),
        "context (a): build_context thread CPU p95 ms": _number(cpu["CPU p95 ms"]),
    }
    search = re.search(r"search_memories p50 ([\d.]+) ms", log)
    if search:
        metrics["context (a): search_memories p50 ms"] = float(search.group(1))
    return metrics


def parse_ingest(report: str, log: str) -> Metrics:
    row = _table_with(report, "database, API configuration", "p50 ms", "p99 ms")[0]
    if _number(row["errors"]):
        raise ValueError(f"ingest had {row['errors']} errors")
    return {
        "ingest (sqlite, 200/s): p50 ms": _number(row["p50 ms"]),
        "ingest (sqlite, 200/s): p90 ms": _number(row["p90 ms"]),
        "ingest (sqlite, 200/s): p99 ms": _number(row["p99 ms"]),
        "ingest (sqlite, 200/s): API CPU per request ms": _number(row["API CPU per request"]),
    }


def parse_extraction(report: str, log: str) -> Metrics:
    row = _table_with(report, "database", "worker", "turns/s")[0]
    if "timed out" in row["turns/s"] or _number(row["failed"]):
        raise ValueError(f"extraction timed out or failed runs: {row}")
    return {
        "extraction (sqlite, -c 32): turns/s (higher is better)": _number(row["turns/s"]),
        "extraction (sqlite, -c 32): run p50 ms": _number(row["run p50 ms"]),
        "extraction (sqlite, -c 32): worker CPU per turn ms": _number(row["worker CPU/turn"]),
    }


@dataclass(frozen=True)
class Bench:
    name: str  # the module is bench.bench_<name>
    args: Callable[[Path, Path], list[str]]  # (out file, scratch folder) → flags
    parse: Callable[[str, str], Metrics]  # (its markdown report, its stderr) → metrics


# -- worktrees and runs ----------------------------------------------------------------------


@dataclass
class Ref:
    label: str  # BASE or HEAD
    name: str  # as given
    sha: str
    tree: Path
    scratch: Path
    metrics: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, text=True, capture_output=True
    ).stdout.strip()


@contextlib.contextmanager
def worktrees(
    repo: Path, refs: Sequence[tuple[str, str]], root: Path, keep: bool
) -> Iterator[list[Ref]]:
    made: list[Ref] = []
    try:
        for label, name in refs:
            sha = git("rev-parse", "--verify", f"{name}^{{commit}}", cwd=repo)
            tree = root / label.lower()
            git("worktree", "add", "--detach", str(tree), sha, cwd=repo)
            scratch = root / f"{label.lower()}-scratch"
            scratch.mkdir()
            made.append(Ref(label, name, sha, tree, scratch))
        yield made
    finally:
        if not keep:
            for ref in made:
                with contextlib.suppress(subprocess.CalledProcessError):
                    git("worktree", "remove", "--force", str(ref.tree), cwd=repo)
            with contextlib.suppress(subprocess.CalledProcessError):
                git("worktree", "prune", cwd=repo)


def run_bench(bench: Bench, ref: Ref, round_no: int, python: str) -> tuple[float, str]:
    """One bench of one ref; returns (wall seconds, outcome)."""
    stem = f"{bench.name}-{round_no}"
    out = ref.scratch / f"{stem}.md"
    stdout, stderr = ref.scratch / f"{stem}.stdout", ref.scratch / f"{stem}.stderr"
    argv = [python, "-m", f"bench.bench_{bench.name}", *bench.args(out, ref.scratch)]
    env = {**os.environ, "PYTHONPATH": str(ref.tree), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    with stdout.open("wb") as out_f, stderr.open("wb") as err_f:
        # Its own process group, so a timeout can interrupt it (and its services) as Ctrl-C does.
        proc = subprocess.Popen(
            argv, cwd=ref.tree, env=env, stdout=out_f, stderr=err_f, start_new_session=True
        )
        try:
            code = proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
            raise
    wall = time.monotonic() - started
    log = stderr.read_text(errors="replace")
    try:
        if code != 0:
            tail = [line for line in log.splitlines() if line.strip()][-15:] or ["(no stderr)"]
            raise RuntimeError(f"exit {code}: {tail[-1]}\n" + "\n".join(tail))
        metrics = bench.parse(out.read_text(), log)
    except (RuntimeError, ValueError, OSError, KeyError) as exc:
        first, *rest = str(exc).splitlines() or [type(exc).__name__]
        if rest:
            print("\n".join(rest), file=sys.stderr)
        ref.failures.append(f"{bench.name} round {round_no}: {first}")
        return wall, f"FAILED ({first})"
    for name, value in metrics.items():
        ref.metrics.setdefault(name, []).append(value)
    return wall, "ok"


# -- report ----------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def python_version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        check=True,
        text=True,
        capture_output=True,
    ).stdout.strip()


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min) / {five:.2f} (5 min)"


def _fmt(values: Sequence[float]) -> str:
    """The median of `values` (a dash when there are none)."""
    if not values:
        return "—"
    value = statistics.median(values)
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def render(base: Ref, head: Ref, header: Sequence[str]) -> str:
    lines = [
        *header,
        "",
        f"| metric | BASE {base.sha[:7]} median | HEAD {head.sha[:7]} median | HEAD/BASE "
        "| rounds BASE; HEAD |",
        "|---|---|---|---|---|",
    ]
    names = [*base.metrics, *(n for n in head.metrics if n not in base.metrics)]
    for name in names:
        a, b = base.metrics.get(name, []), head.metrics.get(name, [])
        ratio = f"{statistics.median(b) / statistics.median(a):.3f}" if a and b else "—"
        runs = "; ".join(", ".join(_fmt([v]) for v in vs) or "—" for vs in (a, b))
        lines.append(f"| {name} | {_fmt(a)} | {_fmt(b)} | {ratio} | {runs} |")
    lines += [
        "",
        "Lower is better except where a metric says otherwise. The latencies are wall time "
        "and move with the machine's load; the CPU-per-request/turn and thread-CPU rows are "
        "the steadier signal for a code regression.",
    ]
    failures = [f"{r.label}: {f}" for r in (base, head) for f in r.failures]
    if failures:
        lines += ["", "Runs that failed:", "", *[f"- {f}" for f in failures]]
    return "\n".join(lines) + "\n"


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.compare_refs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("base", help="the ref measured first (e.g. the commit before a change)")
    p.add_argument("head", help="the ref compared with it")
    p.add_argument("--rounds", type=int, default=2, help="rounds per bench (A B, then B A, ...)")
    p.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes)")
    p.add_argument(
        "--benches",
        default="context,ingest,extraction",
        help="comma-separated subset of context, ingest, extraction",
    )
    p.add_argument(
        "--python",
        default=sys.executable,  # the venv this runs in
        help="the venv python every bench runs with",
    )
    p.add_argument("--extraction-redis-url", default=EXTRACTION_REDIS_URL)
    p.add_argument("--repo", type=Path, default=HERE.parent, help="the git repository")
    p.add_argument("--out", type=Path, default=None, help="also write the table here")
    p.add_argument("--keep", action="store_true", help="keep the worktrees and outputs")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    command = "python -m bench.compare_refs " + shlex.join(sys.argv[1:] if argv is None else argv)
    sizes = QUICK if args.quick else FULL
    every = {
        "context": Bench("context", lambda o, s: context_args(sizes, o, s), parse_context),
        "ingest": Bench("ingest", lambda o, s: ingest_args(sizes, o, s), parse_ingest),
        "extraction": Bench(
            "extraction",
            lambda o, s: extraction_args(sizes, o, s, args.extraction_redis_url),
            parse_extraction,
        ),
    }
    benches = [every[name.strip()] for name in args.benches.split(",") if name.strip()]
    repo = Path(git("rev-parse", "--show-toplevel", cwd=args.repo))
    root = Path(tempfile.mkdtemp(prefix="tiermem-compare-"))
    started, load_start = time.monotonic(), load_average()
    print(f"compare_refs: worktrees and outputs in {root}", file=sys.stderr)
    try:
        with worktrees(repo, [("BASE", args.base), ("HEAD", args.head)], root, args.keep) as refs:
            base, head = refs
            for round_no in range(1, args.rounds + 1):
                for bench in benches:
                    # ABBA: the order flips each round, so a steady drift in the shared
                    # machine's load weighs on both refs alike.
                    for ref in (base, head) if round_no % 2 else (head, base):
                        wall, outcome = run_bench(bench, ref, round_no, args.python)
                        print(
                            f"[{time.strftime('%H:%M:%S')}] round {round_no} {bench.name:10} "
                            f"{ref.label} {ref.sha[:7]}: {wall:5.0f} s, {outcome}",
                            file=sys.stderr,
                        )
            header = [
                f"# Benchmarks: {args.base} ({base.sha[:7]}) against {args.head} ({head.sha[:7]})",
                "",
                f"- Command: `{command}`",
                f"- Machine: nproc {os.cpu_count()}, {cpu_model()}, Python "
                f"{python_version(args.python)} ({args.python})",
                f"- Load average at start: {load_start}; at end: {load_average()}; wall time "
                f"{(time.monotonic() - started) / 60:.1f} min",
                f"- {args.rounds} round(s), BASE and HEAD interleaved per bench (the order flips "
                "each round); each ref runs its "
                "own bench/ code from a detached worktree",
                *[
                    f"- bench_{b.name}: `{shlex.join(b.args(Path('OUT.md'), Path('TMP')))}`"
                    for b in benches
                ],
            ]
            table = render(base, head, header)
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(table)
    if args.out is not None:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
