"""The `tiermem` command: serve, api, worker, beat, migrate, import, reindex, compact,
repair-ids, tenants, sweep, ops, replay, mcp."""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from services.cli.mcp import mcp
from services.cli.ops import ops_cli
from services.cli.replay import replay_cli
from services.cli.settings import load_settings
from shared.errors import DomainError, Unavailable
from shared.ops.queue_names import QUEUES, REPLAY

# The help of every command is printed from this module and the ones above, so they import
# the product (FastAPI, Celery, SQL, the vector engine, the models) only inside the command
# that runs: `tiermem --help` stays a fraction of a second (docs/benchmarks.md, "CLI help").
if TYPE_CHECKING:
    from rich.progress import Progress
    from sqlmodel import Session

    from shared.config import Settings
    from shared.records.models import TranscriptLine
    from shared.vectors.folder_owner import FolderOwner

cli = typer.Typer(
    help="tiermem: long-term memory for multi-user chat backends.",
    no_args_is_help=True,
    add_completion=False,
    # Markdown joins a docstring's wrapped lines; rich markup would print its line breaks.
    rich_markup_mode="markdown",
)
tenants_cli = typer.Typer(help="Tenants and their API keys.", no_args_is_help=True)
cli.add_typer(tenants_cli, name="tenants")
cli.add_typer(ops_cli, name="ops")
cli.add_typer(replay_cli, name="replay")
cli.command()(mcp)

console = Console(stderr=True)


def _logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="default TIERMEM_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="default TIERMEM_PORT")] = None,
    concurrency: Annotated[int | None, typer.Option(help="worker threads")] = None,
) -> None:
    """API and worker in one process: SQLite, embedded Qdrant, local embeddings, no servers."""
    import uvicorn

    from services.api.main import create_app
    from services.embedded import EmbeddedWorker
    from shared.db.migrate import upgrade_to_head
    from shared.runtime import Runtime

    settings = load_settings()
    _logging(settings)
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    _own_vector_folder(settings, "serve", lambda: runtime.vectors)
    runtime.embedder.embed(["warm up"])  # load the model before the first request needs it
    worker = EmbeddedWorker(runtime, concurrency=concurrency or settings.worker.concurrency)
    worker.start()
    if hasattr(signal, "SIGUSR1"):  # `tiermem import` beside this process wakes its sweeper
        signal.signal(signal.SIGUSR1, lambda *_: worker.wake())
    label = (
        "LLM at " + str(settings.llm.base_url)
        if settings.llm.base_url
        else ("offline rule-based extractor (set TIERMEM_LLM__BASE_URL for an LLM)")
    )
    console.print(f"tiermem serve: extraction by {label}; data in {settings.data_dir}")
    if settings.dev_app_key:
        console.print(f"development app key: [bold]{settings.dev_app_key}[/bold]")
    app = create_app(settings, runtime=runtime, celery=worker.celery)
    try:
        uvicorn.run(
            app,
            host=host or settings.host,
            port=port or settings.port,
            log_level=settings.log_level.lower(),
            access_log=settings.access_log,
        )
    finally:
        worker.stop()
        runtime.close()


@cli.command()
def api(
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes")] = 1,
) -> None:
    """The API alone; workers run separately (`tiermem worker`) against TIERMEM_REDIS_URL."""
    import uvicorn

    settings = load_settings()
    if not settings.redis_url:
        console.print(
            "[red]tiermem api needs TIERMEM_REDIS_URL[/red] to reach its workers; "
            "for one process without servers run `tiermem serve`."
        )
        raise typer.Exit(2)
    _logging(settings)
    if settings.database.auto_migrate:
        from shared.db.migrate import upgrade_to_head

        # Once, here: N uvicorn worker processes migrating at startup would race each other.
        upgrade_to_head(settings)
        os.environ["TIERMEM_DATABASE__AUTO_MIGRATE"] = "false"
    uvicorn.run(
        "services.api.main:create_app",
        factory=True,
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        log_level=settings.log_level.lower(),
        access_log=settings.access_log,
    )


@cli.command()
def worker(
    queues: Annotated[
        str, typer.Option(help="comma-separated; maintenance takes the outbox sweeps")
    ] = ",".join(QUEUES),
    concurrency: Annotated[int | None, typer.Option()] = None,
    pool: Annotated[str | None, typer.Option(help="threads | prefork | solo")] = None,
    beat: Annotated[bool, typer.Option(help="also run the outbox sweeper schedule")] = False,
    replay_concurrency: Annotated[
        int,
        typer.Option(
            help="also take the replay queue in this process, with this many threads of its "
            "own (for an embedded Qdrant folder, which one process owns); 0 = no"
        ),
    ] = 0,
    name: Annotated[
        str | None,
        typer.Option(
            help="its node name (Celery's -n: %h is the host name); default "
            "TIERMEM_WORKER__NAME, else tiermem-QUEUES-PID@HOST, unique per process"
        ),
    ] = None,
    loglevel: Annotated[str, typer.Option()] = "INFO",
) -> None:
    """A Celery worker on TIERMEM_REDIS_URL."""
    settings = load_settings()
    if not settings.redis_url:
        console.print(
            "[red]tiermem worker needs TIERMEM_REDIS_URL[/red]; "
            "for one process without servers run `tiermem serve`."
        )
        raise typer.Exit(2)
    from shared.db.migrate import upgrade_to_head
    from shared.vectors import open_vector_store
    from workers.runtime import get_runtime

    pool = pool or settings.worker.pool
    # Prefork children open the store themselves (a client must not cross a fork): the
    # parent only checks that the folder is free.
    _own_vector_folder(
        settings,
        "worker",
        (lambda: open_vector_store(settings).close())
        if pool == "prefork"
        else (lambda: get_runtime().vectors),
    )
    from workers.celery_app import make_celery
    from workers.ops import node_name

    app = make_celery(settings)
    if settings.database.auto_migrate:
        upgrade_to_head(settings)
    queue_names = queues.split(",")
    label = "+".join([*queue_names, REPLAY] if replay_concurrency else queue_names)
    hostname = node_name(label, name or settings.worker.name)
    argv = [
        "worker",
        "-n",
        hostname,
        "-Q",
        queues,
        "-P",
        pool,
        "-c",
        str(concurrency or settings.worker.concurrency),
        "--loglevel",
        loglevel,
    ]
    if beat:
        settings.data_dir.mkdir(parents=True, exist_ok=True)  # beat's schedule file
        argv.append("-B")
    if replay_concurrency:
        if REPLAY in queue_names or beat:
            console.print(
                "[red]--replay-concurrency is for a worker whose --queues leave out replay, "
                "without --beat (run `tiermem beat` on its own)"
            )
            raise typer.Exit(2)
        from services.embedded import run_worker_pair

        live_threads = concurrency or settings.worker.concurrency
        run_worker_pair(app, queue_names, live_threads, replay_concurrency, hostname)
        return
    app.worker_main(argv)


@cli.command()
def beat(loglevel: Annotated[str, typer.Option()] = "INFO") -> None:
    """Celery beat: schedules the outbox sweeper."""
    settings = load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)  # beat's schedule file
    from workers.celery_app import make_celery

    make_celery(settings).start(["beat", "--loglevel", loglevel])


@cli.command()
def migrate() -> None:
    """Upgrade the database to the newest schema (alembic upgrade head)."""
    from shared.db.migrate import upgrade_to_head

    settings = load_settings()
    upgrade_to_head(settings)
    console.print(f"database at head: {settings.sqlalchemy_url.split('@')[-1]}")


@cli.command("import")
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
            with _progress() as progress:
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


@cli.command("import-mem0")
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
        _own_vector_folder(settings, "import-mem0", lambda: runtime.vectors)
        with Session(runtime.engine, expire_on_commit=False) as session:
            tenant_id = _import_tenant(session, settings, tenant)
            with _progress() as progress:
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


@cli.command()
def reindex(
    user: Annotated[str | None, typer.Option(help="only this user id")] = None,
    tenant: Annotated[str | None, typer.Option(help="tenant name")] = None,
) -> None:
    """Rebuild vector collections from SQL (the system of record), message collections with
    their sparse vectors."""
    from sqlmodel import Session

    from shared.flows.reindex import reindex_all
    from shared.records.tenancy import get_tenant_by_name
    from shared.runtime import Runtime
    from shared.vectors import local_mode_leftovers

    settings = load_settings()
    runtime = Runtime(settings)
    try:
        with Session(runtime.engine) as session:
            tenant_id = None
            if tenant:
                row = get_tenant_by_name(session=session, name=tenant)
                if row is None:
                    console.print(f"[red]tenant {tenant!r} not found[/red]")
                    raise typer.Exit(1)
                tenant_id = row.id
            with _progress() as progress:
                task = progress.add_task("reindexing users", total=None)
                users, points = reindex_all(
                    runtime=runtime,
                    session=session,
                    tenant_id=tenant_id,
                    user_external_id=user,
                    progress=lambda n: progress.advance(task, n),
                )
    except DomainError as exc:
        console.print(f"[red]reindex failed:[/red] {exc.message}")
        raise typer.Exit(1) from exc
    finally:
        runtime.close()
    console.print(f"reindexed {users} users, {points} active facts")
    earlier = local_mode_leftovers(settings)
    if earlier is not None and user is None and tenant is None:
        console.print(
            f"{earlier} holds an earlier tiermem's vectors (qdrant-client's local mode), now "
            f"rebuilt in {settings.qdrant_path}: nothing reads it, delete it",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@cli.command()
def compact() -> None:
    """Rewrite the embedded vector shards without the points of deleted users and memories,
    as new shards are made today (run while serve is stopped: the folder takes one
    process). A Qdrant server does this by itself."""
    from shared.ops.vectors import compact_all
    from shared.vectors import open_vector_store

    settings = load_settings()
    try:
        store = open_vector_store(settings)
        try:
            with _progress() as progress:
                task = progress.add_task("compacting collections", total=None)
                done = compact_all(
                    settings=settings, store=store, progress=lambda n: progress.advance(task, n)
                )
        finally:
            store.close()
    except DomainError as exc:
        console.print(f"[red]cannot compact:[/red] {exc.message}")
        raise typer.Exit(1) from exc
    if not done.collections:
        console.print("nothing to compact: no vector collections yet")
    elif not done.compacted:
        console.print(f"nothing to compact: deleted points are freed {done.reclaims_deleted}")
    else:
        mb = [(n or 0) / 1e6 for n in (done.disk_before, done.disk_after)]
        console.print(f"compacted {done.compacted} collections: {mb[0]:,.1f} MB → {mb[1]:,.1f} MB")


@cli.command("repair-ids")
def repair_ids(
    apply: Annotated[bool, typer.Option(help="rename them (default: only list them)")] = False,
) -> None:
    """Find user, session and message ids stored before the id rule was enforced in full
    (e.g. with a trailing newline) and rename them to ids the API can reach."""
    from sqlmodel import Session

    from shared.db.engine import make_engine
    from shared.db.id_repair import apply_repairs, find_unreachable_ids

    engine = make_engine(load_settings())
    try:
        with Session(engine) as session:
            repairs = find_unreachable_ids(session)
            for r in repairs:
                where = "session" if r.kind == "message" else "tenant"
                print(f"{r.kind}\t{where} {r.scope}\t{r.old!r} -> {r.new!r}")
            if repairs and apply:
                apply_repairs(session, repairs)
    finally:
        engine.dispose()
    if not repairs:
        console.print("every stored id follows the id rule; nothing to repair")
    elif apply:
        console.print(f"renamed {len(repairs)} ids; tell their owners the new ids above")
    else:
        console.print(f"{len(repairs)} ids break the id rule; run with --apply to rename them")


@cli.command()
def sweep() -> None:
    """Re-enqueue extraction runs the broker lost (what beat runs every minute)."""
    settings = load_settings()
    if not settings.redis_url:
        console.print("[red]needs TIERMEM_REDIS_URL[/red]: `tiermem serve` sweeps by itself.")
        raise typer.Exit(2)
    from workers.celery_app import make_celery
    from workers.tasks.outbox import sweep_outbox

    console.print(f"re-enqueued {sweep_outbox(make_celery(settings))} runs")


@tenants_cli.command("create")
def tenants_create(name: str) -> None:
    """Create a tenant and print its first app key (shown once)."""
    _key_command(name=name, create=True, scope="app")


@tenants_cli.command("key")
def tenants_key(
    name: str, admin: Annotated[bool, typer.Option(help="an admin-scope key")] = False
) -> None:
    """Create another key for an existing tenant (printed once)."""
    _key_command(name=name, create=False, scope="admin" if admin else "app")


def _key_command(*, name: str, create: bool, scope: str) -> None:
    from sqlmodel import Session

    from shared.db.engine import make_engine
    from shared.db.migrate import upgrade_to_head
    from shared.records.tenancy import create_api_key, create_tenant, get_tenant_by_name

    settings = load_settings()
    upgrade_to_head(settings)
    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            row = (
                create_tenant(session=session, name=name)
                if create
                else get_tenant_by_name(session=session, name=name)
            )
            if row is None:
                raise DomainError(f"tenant {name!r} not found")
            _, key = create_api_key(
                session=session,
                tenant_id=row.id,
                name="cli",
                scope="admin" if scope == "admin" else "app",
            )
    except DomainError as exc:
        console.print(f"[red]{exc.message}[/red]")
        raise typer.Exit(1) from exc
    finally:
        engine.dispose()
    console.print(f"tenant {name}: {scope} key (shown once):")
    print(key)


def _own_vector_folder(settings: Settings, command: str, open_store: Callable[[], object]) -> None:
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


def _progress() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
