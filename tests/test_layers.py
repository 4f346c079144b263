"""Imports point down: the import-linter contracts in pyproject.toml ([tool.importlinter])
hold — shared/'s rooms in layers (every room placed, siblings apart, imports inside functions
counted), shared/ free of the apps and their frameworks, routes reaching the workers only
through the TaskQueue. docs/architecture.md draws the same layers; ADR 0020 says why."""

from __future__ import annotations

import sys
from pathlib import Path

from tests import processes

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold() -> None:
    # In a process of its own: lint-imports configures logging with dictConfig, which would
    # disable every logger this test process has made (and empty caplog for later tests).
    lint = Path(sys.executable).parent / "lint-imports"
    done = processes.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
