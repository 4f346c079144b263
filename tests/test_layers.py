"""Imports point down: the import-linter contracts in pyproject.toml ([tool.importlinter])
hold — shared/'s rooms in layers (every room placed, siblings apart, imports inside functions
counted), shared/ free of the apps and their frameworks, routes reaching the workers only
through the TaskQueue. docs/architecture.md draws the same layers; ADR 0020 says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_the_import_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    assert status == EXIT_STATUS_SUCCESS, capsys.readouterr().out
