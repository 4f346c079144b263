"""`tiermem --help` and every command's `--help`: they load the command line alone, none of
the product's heavy dependencies (a command imports those when it runs), and each command's
summary and description read as written, without line breaks in mid-sentence."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests import processes

# What a command loads when it runs; loading them for its help cost seconds. (pydantic is
# not among them: typer parses parameters with it.)
HEAVY = (
    "alembic", "anyio", "celery", "fastapi", "httpx", "kombu", "mcp", "numpy", "onnxruntime",
    "openai", "pydantic_settings", "qdrant_client", "qdrant_edge", "redis", "sqlalchemy",
    "sqlmodel", "starlette", "tiktoken", "tokenizers", "uvicorn",
)  # fmt: skip

# Each command's help, rendered as `tiermem ... --help` does, in one process; then what that
# process had loaded.
PROBE = """
import contextlib, io, json, sys
import click, typer
from services.cli.main import cli

root = typer.main.get_command(cli)

def paths(command, prefix):
    yield prefix
    for name, sub in getattr(command, "commands", {}).items():
        yield from paths(sub, [*prefix, name])

helps = {}
for path in paths(root, []):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit, click.exceptions.Exit):
        root.main([*path, "--help"], prog_name="tiermem", standalone_mode=False)
    helps[" ".join(path)] = out.getvalue()
json.dump({"helps": helps, "modules": sorted(m.split(".")[0] for m in sys.modules)}, sys.stdout)
"""


def probe() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}
    done = processes.run(
        [sys.executable, "-c", PROBE],
        env={**env, "COLUMNS": "400", "TERM": "dumb"},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_help_loads_none_of_the_heavy_modules() -> None:
    found = probe()
    assert {"", "worker", "replay start", "ops status", "mcp", "tenants key"} <= set(found["helps"])
    for path, text in found["helps"].items():
        assert f"Usage: tiermem {path}".replace("  ", " ").strip() in text, text
    loaded = set(found["modules"]) & set(HEAVY)
    assert not loaded, f"`tiermem --help` loads {sorted(loaded)}: import them where they're used"


def test_help_has_no_line_break_in_mid_sentence() -> None:
    """400 columns leave room for every line: a line that does not end a sentence, a list
    row or a panel is a line break the docstring or option text carried into the help."""
    for path, text in probe()["helps"].items():
        for line in text.splitlines():
            body = line.strip().strip("│").strip()
            if not body or body.startswith(("╭", "╰", "Usage:")):
                continue
            assert body.endswith((".", ")", "]", ":", "…")) or _is_row(line), (path, line)


def _is_row(line: str) -> bool:
    """A row of a panel (a command or an option, with its help) ends wherever its text ends;
    a continuation row, indented to the help column, is a wrapped line."""
    inside = line.removeprefix("│")
    return line.startswith("│") and len(inside) - len(inside.lstrip()) <= 5
