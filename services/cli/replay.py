"""`tiermem replay ...`: start, follow, cancel and resume a replay (with a progress bar)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from services.cli.settings import load_settings
from shared.errors import DomainError

if TYPE_CHECKING:  # loaded by the commands when they run, not by their --help
    from shared.records.replay import ReplayProgress
    from shared.runtime import Runtime

replay_cli = typer.Typer(help="Re-run extraction over stored turns.", no_args_is_help=True)
console = Console(stderr=True)


@contextmanager
def _runtime() -> Iterator[Runtime]:
    """This process's Runtime; a refused request prints its reason and exits 2."""
    from shared.runtime import Runtime

    settings = load_settings()
    if not settings.redis_url:
        console.print(
            "[red]tiermem replay needs TIERMEM_REDIS_URL[/red] (its workers take the replay "
            "queue); under `tiermem serve` use POST /v1/replay."
        )
        raise typer.Exit(2)
    runtime = Runtime(settings)
    try:
        yield runtime
    except (DomainError, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    finally:
        runtime.close()


def _follow(runtime: Runtime, job_id: str, interval: float = 1.0) -> None:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from sqlmodel import Session

    from shared.records import replay

    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}/s · {task.fields[failed]} failed"),
        TimeElapsedColumn(), TimeRemainingColumn(),
    )  # fmt: skip
    with Progress(*columns, console=console) as bar:
        task = None
        while True:
            with Session(runtime.engine) as session:
                now = replay.progress(session=session, job_id=job_id)
            if task is None:
                task = bar.add_task(f"{now.mode} {job_id[:8]}", total=now.total, rate=0, failed=0)
            bar.update(
                task, completed=now.done + now.failed, rate=now.rate_per_s, failed=now.failed
            )
            if now.status != "running":
                break
            time.sleep(interval)
    _summary(now)


def _summary(now: ReplayProgress) -> None:
    console.print(
        f"replay {now.id}: {now.status} · {now.done} done, {now.failed} failed, "
        f"{now.pending + now.running} open, {now.staged} staged of {now.total}"
    )
    for user, report in list(now.report.items())[:20]:
        counts = {k: (len(v) if isinstance(v, list) else v) for k, v in report.items()}
        console.print(f"  {user}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for error in now.errors[:5]:
        console.print(f"  [red]failed[/red] {error['run_id']}: {error['error']}")


@replay_cli.command()
def start(
    mode: Annotated[str, typer.Option(help="dry_run | apply | rebuild")],
    tenant: Annotated[str | None, typer.Option(help="tenant name (default: every tenant)")] = None,
    user: Annotated[list[str] | None, typer.Option(help="a user's external id (repeat)")] = None,
    session_id: Annotated[
        list[str] | None, typer.Option("--session", help="a session's external id (repeat)")
    ] = None,
    since: Annotated[dt.datetime | None, typer.Option(help="turns said at or after")] = None,
    until: Annotated[dt.datetime | None, typer.Option(help="turns said before")] = None,
    stale_only: Annotated[
        bool, typer.Option(help="only turns last extracted by another extractor version")
    ] = False,
    follow: Annotated[bool, typer.Option(help="show a progress bar until it ends")] = True,
) -> None:
    """Select stored turns and re-extract them on the replay queue."""
    from sqlmodel import Session

    from shared.flows.replay_extraction import create_job
    from shared.records import replay
    from shared.records.tenancy import get_tenant_by_name
    from workers.task_queue import TaskQueue

    with _runtime() as runtime:
        with Session(runtime.engine) as session:
            tenant_id = None
            if tenant:
                found = get_tenant_by_name(session=session, name=tenant)
                if found is None:
                    raise DomainError(f"tenant {tenant!r} not found")
                tenant_id = found.id
            body = replay.ReplayIn.model_validate({
                "mode": mode, "tenant_id": tenant_id, "user_ids": user or None,
                "session_ids": session_id or None, "since": since, "until": until,
                "stale_only": stale_only,
            })  # fmt: skip
            job = create_job(session=session, runtime=runtime, body=body)
        TaskQueue(runtime.settings).replay(job.id)
        console.print(f"replay {job.id}: {job.total} turns, mode {job.mode}")
        if follow:
            _follow(runtime, job.id)


@replay_cli.command()
def status(
    job_id: str, follow: Annotated[bool, typer.Option(help="until it ends")] = False
) -> None:
    """Progress of a replay: done/total, rate, ETA, errors, and its per-user report."""
    from sqlmodel import Session

    from shared.records import replay

    with _runtime() as runtime:
        if follow:
            _follow(runtime, job_id)
        else:
            with Session(runtime.engine) as session:
                _summary(replay.progress(session=session, job_id=job_id))


@replay_cli.command()
def cancel(job_id: str) -> None:
    """Stop taking its turns (the pending ones stay for `resume`)."""
    from sqlmodel import Session

    from shared.records import replay

    with _runtime() as runtime, Session(runtime.engine) as session:
        replay.cancel(session=session, job_id=job_id)
        console.print(f"replay {job_id}: cancelled")


@replay_cli.command()
def resume(job_id: str, follow: Annotated[bool, typer.Option()] = True) -> None:
    """Send its unfinished turns again (after a cancel or a worker crash)."""
    from sqlmodel import Session

    from shared.records import replay
    from workers.task_queue import TaskQueue

    with _runtime() as runtime:
        with Session(runtime.engine) as session:
            replay.resume(session=session, job_id=job_id)
        TaskQueue(runtime.settings).replay(job_id)
        if follow:
            _follow(runtime, job_id)
