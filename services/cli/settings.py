"""Settings for a `tiermem` command: invalid ones are printed as what to change, then exit 2."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:  # pydantic is loaded by a command that runs, not by its --help
    from pydantic_core import ErrorDetails

    from shared.config import Settings


def load_settings() -> Settings:
    from pydantic import ValidationError

    from shared.config import get_settings

    try:
        return get_settings()
    except ValidationError as exc:
        Console(stderr=True).print(
            "invalid settings:\n" + "\n".join(f"- {_problem(e)}" for e in exc.errors()),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(2) from exc


def _problem(error: ErrorDetails) -> str:
    """One line: a validator's own message names its variables; a field's error gets its
    variable's name (never its value, which may be a secret)."""
    if error["type"] == "value_error":
        return error["msg"].removeprefix("Value error, ")
    variable = "TIERMEM_" + "__".join(str(part) for part in error["loc"]).upper()
    return f"{variable}: {error['msg']}"
