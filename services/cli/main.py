"""The `tiermem` command: serve, api, worker, beat, migrate, import, reindex, compact,
repair-ids, tenants, sweep, ops, replay, mcp — each defined in the module named below."""

from __future__ import annotations

import typer

from services.cli.importing import import_, import_mem0
from services.cli.maintenance import compact, migrate, reindex, repair_ids, sweep
from services.cli.mcp import mcp
from services.cli.ops import ops_cli
from services.cli.processes import api, beat, serve, worker
from services.cli.replay import replay_cli
from services.cli.tenants import tenants_cli

# The help of every command is printed from these modules, so they import the product
# (FastAPI, Celery, SQL, the vector engine, the models) only inside the command that runs:
# `tiermem --help` stays a fraction of a second (docs/benchmarks.md, "CLI help").
cli = typer.Typer(
    help="tiermem: long-term memory for multi-user chat backends.",
    no_args_is_help=True,
    add_completion=False,
    # Markdown joins a docstring's wrapped lines; rich markup would print its line breaks.
    rich_markup_mode="markdown",
)
cli.add_typer(tenants_cli, name="tenants")
cli.add_typer(ops_cli, name="ops")
cli.add_typer(replay_cli, name="replay")
cli.command()(mcp)
cli.command()(serve)
cli.command()(api)
cli.command()(worker)
cli.command()(beat)
cli.command()(migrate)
cli.command("import")(import_)
cli.command("import-mem0")(import_mem0)
cli.command()(reindex)
cli.command()(compact)
cli.command("repair-ids")(repair_ids)
cli.command()(sweep)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
