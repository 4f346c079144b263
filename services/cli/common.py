"""What the `tiermem` commands share: the console they print to, logging, the progress bar,
and the check that this process may open the embedded vector folder."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from shared.errors import Unavailable

if TYPE_CHECKING:  # loaded by the commands when they run, not by their --help
    from rich.progress import Progress

    from shared.config import Settings

console = Console(stderr=True)


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def own_vector_folder(settings: Settings, command: str, open_store: Callable[[], object]) -> None:
    """Open an embedded Qdrant folder before taking any work: a second process on the same
    folder stops here, naming the holder, instead of taking tasks it could only fail."""
    if settings.qdrant_path is None:
        return  # a Qdrant server takes many clients; in memory is this process's own
    try:
        open_store()
    except Unavailable as exc:
        console.print(
            f"tiermem {command} cannot start: {exc.message}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from exc


def progress_bar() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
