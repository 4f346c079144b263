"""`tiermem import` and `tiermem import-mem0`: a transcript's messages, or a mem0 store's
memories, brought into a tenant."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.cli.common import console, own_vector_folder, progress_bar
from services.cli.settings import load_settings
from shared.errors import DomainError

if TYPE_CHECKING:  # loaded by the commands when they run, not by their --help
    from sqlmodel import Session

    from shared.config import Settings
    from shared.records.models import TranscriptLine
    from shared.vectors.folder_owner import FolderOwner


def import_(
    file: Annotated[
        Path,
        typer.Argument(
            help="JSONL: user_id, session_id, role, speaker, "
            "content, created_at, external_id per line"
        ),
    ],
    tenant: Annotated[
        str | None, typer.Option(help="tenant name (default: the dev tenant)")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, max=5000)] = 500,
) -> None:
    """Load an existing transcript and queue extraction for every user turn."""
    from sqlmodel import Session

    from shared.db.migrate import upgrade_to_head
    from shared.flows.import_transcripts import import_lines, read_jsonl
    from shared.runtime import Runtime

    settings = load_settings()
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    enqueue = _enqueuer(settings)
    try:
        with Session(runtime.engine, expire_on_commit=False) as session:
            tenant_id = _import_tenant(session, settings, tenant)
            lines = list(read_jsonl(file.open(encoding="utf-8")))
            stored = dupes = queued = 0
            with progress_bar() as progress:
                task = progress.add_task("importing", total=len(lines))
                for chunk in _chunks(lines, batch_size):
                    summary = import_lines(
                        session=session, settings=settings, tenant_id=tenant_id, lines=chunk
                    )
                    enqueue(summary.run_ids)
                    stored, dupes = stored + summary.stored, dupes + summary.duplicates
                    queued += len(summary.run_ids)
                    progress.advance(task, len(chunk))
    except (DomainError, OSError, UnicodeDecodeError) as exc:
        console.print(f"[red]import failed:[/red] {getattr(exc, 'message', exc)}")
        raise typer.Exit(1) from exc
    finally:
        runtime.close()
    console.print(f"stored {stored} messages ({dupes} already present)")
    if not queued:
        return
    if settings.redis_url:
        console.print(f"{queued} turns queued for extraction by the workers")
    elif server := _wake_running_serve(settings):
        console.print(
            f"{queued} turns handed to the running `tiermem serve` ({server.describe()}): "
            "extraction starts now; follow it with `tiermem ops status`"
        )
    else:
        console.print(
            f"{queued} turns queued: no `tiermem serve` runs on this data folder now, and the "
            "one you start next extracts them as it starts"
        )


def _wake_running_serve(settings: Settings) -> FolderOwner | None:
    """The `tiermem serve` holding this data folder, told (SIGUSR1) to send the stored turns
    to its in-process workers now; None when none runs here."""
    from shared.vectors.folder_owner import read_owner

    if not settings.qdrant_path or not hasattr(signal, "SIGUSR1"):
        return None
    owner = read_owner(settings.qdrant_path)
    if owner is None or owner.is_gone() or owner.hostname != socket.gethostname():
        return None
    if owner.is_this_process() or owner.argv[1:2] != ["serve"]:
        return None  # a `tiermem worker` over Redis takes its turns from the broker
    try:
        os.kill(owner.pid, signal.SIGUSR1)
    except OSError:
        return None
    return owner


def import_mem0(
    source: Annotated[
        Path,
        typer.Argument(
            help="mem0's embedded Qdrant folder (its vector_store path), or a JSON export "
            "(what MemoryClient.get_all / Memory.get_all answer)"
        ),
    ],
    collection: Annotated[str, typer.Option(help="the Qdrant collection mem0 used")] = "mem0",
    tenant: Annotated[
        str | None, typer.Option(help="tenant name (default: the dev tenant)")
    ] = None,
    user: Annotated[str | None, typer.Option(help="owner of memories that name no user_id")] = None,
    batch_size: Annotated[int, typer.Option(min=1, max=5000)] = 200,
) -> None:
    """Bring a mem0 store's memories in as typed facts (extractor mem0-import); a rerun
    adds nothing."""
    from sqlmodel import Session

    from shared.db.migrate import upgrade_to_head
    from shared.mem0_compat.reading import read_store
    from shared.mem0_compat.writing import WriteSummary, write_records
    from shared.runtime import Runtime

    settings = load_settings()
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    summary = WriteSummary()
    try:
        records = read_store(source, collection=collection, user_id=user)
        own_vector_folder(settings, "import-mem0", lambda: runtime.vectors)
        with Session(runtime.engine, expire_on_commit=False) as session:
            tenant_id = _import_tenant(session, settings, tenant)
            with progress_bar() as progress:
                task = progress.add_task("importing mem0 memories", total=len(records))
                for start in range(0, len(records), batch_size):
                    chunk = records[start : start + batch_size]
                    summary.take_all(
                        write_records(
                            runtime=runtime, session=session, tenant_id=tenant_id, records=chunk
                        )
                    )
                    progress.advance(task, len(chunk))
    except DomainError as exc:
        console.print(f"[red]import-mem0 failed:[/red] {exc.message}", soft_wrap=True)
        raise typer.Exit(1) from exc
    finally:
        runtime.close()
    console.print(
        f"{len(records)} mem0 memories: {len(summary.added)} facts added, "
        f"{len(summary.merged)} merged into existing ones, {len(summary.superseded)} "
        f"superseded, {len(summary.unchanged)} already imported",
        soft_wrap=True,
    )


def _import_tenant(session: Session, settings: Settings, tenant: str | None) -> str:
    """The id of the tenant an import writes to (the dev tenant by default, made if new)."""
    from shared.records.tenancy import ensure_dev_tenant, get_tenant_by_name

    ensure_dev_tenant(session=session, settings=settings)
    name = tenant or settings.auth.dev_tenant
    row = get_tenant_by_name(session=session, name=name)
    if row is None:
        raise DomainError(f"tenant {name!r} not found; create it: tiermem tenants create {name}")
    return row.id


def _enqueuer(settings: Settings) -> Callable[[list[str]], None]:
    if not settings.redis_url:
        return lambda run_ids: None  # `tiermem serve` resends every pending run at start
    from workers.task_queue import TaskQueue

    return TaskQueue(settings).extract


def _chunks(lines: list[TranscriptLine], size: int) -> Iterator[list[TranscriptLine]]:
    """Batches of about `size` lines that never split a user message from its reply."""
    start = 0
    while start < len(lines):
        end = min(start + size, len(lines))
        while (
            end < len(lines)
            and lines[end].role == "assistant"
            and lines[end - 1].role == "user"
            and lines[end].session_id == lines[end - 1].session_id
        ):
            end += 1
        yield lines[start:end]
        start = end
