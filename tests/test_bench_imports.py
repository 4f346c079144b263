"""Every benchmark still imports: they are not run in CI (too long), so a renamed or removed
name in shared/ would otherwise break one silently."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
# mem0_runner runs as a script in the benchmark-only venv (bench/.venv), with its own env.
SCRIPTS = {"__init__", "mem0_runner"}
MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in SCRIPTS)


def test_the_benchmarks_are_found() -> None:
    assert {"bench_context", "bench_ingest", "bench_extraction"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_a_benchmark_imports(module: str) -> None:
    importlib.import_module(f"bench.{module}")
