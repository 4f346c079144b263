"""How long `tiermem --help` and a command's `--help` take: wall time and CPU of the whole
process, each command run `--runs` times (issue 24: the target is < 0.5 s).

`--tree LABEL=DIR` adds another checkout of tiermem (for example an older commit, from
`git archive REV | tar -x -C DIR`), run with this venv's python from that folder, so its code
is the one imported. The trees take turns run by run (ABAB…), so a machine that slows down
meanwhile slows both alike.

    python -m bench.bench_cli --runs 20 --tree before=/tmp/tiermem-68eabf5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench._common import (
    REPO,
    RESULTS_DIR,
    command_line,
    load_average,
    machine_line,
    write_results,
)

COMMANDS = ["--help", "worker --help", "replay start --help", "mcp --help", "ops status --help"]


def run_once(tree: Path, args: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one `tiermem ARGS` process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}
    before = os.times()
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args.split()],
        cwd=tree,
        env={**env, "COLUMNS": "100"},
        stdout=subprocess.DEVNULL,
        check=True,
    )
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tree", action="append", default=[], help="LABEL=DIR (repeat)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "cli.md")
    args = parser.parse_args(argv)
    trees = {"this tree": REPO}
    trees.update(dict(t.split("=", 1) for t in args.tree))
    load_before = load_average()
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for command in COMMANDS:
        for tree in trees.values():  # once, unmeasured: the page cache is warm for all
            run_once(Path(tree), command)
        for _ in range(args.runs):
            for label, tree in trees.items():
                samples.setdefault((command, label), []).append(run_once(Path(tree), command))
    lines = [
        "# CLI help",
        "",
        f"- machine: {machine_line()}",
        f"- load average: {load_before} before, {load_average()} after",
        f"- command: `{command_line('python -m bench.bench_cli', argv)}`",
        "",
        "| command | tree | wall median | wall min–max | CPU median |",
        "|---|---|---|---|---|",
    ]
    for (command, label), runs in samples.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        lines.append(
            f"| `tiermem {command}` | {label} | {statistics.median(walls):.2f} s "
            f"| {min(walls):.2f}–{max(walls):.2f} s | {statistics.median(cpus):.2f} s |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    write_results(args.output, text)


if __name__ == "__main__":
    main()
