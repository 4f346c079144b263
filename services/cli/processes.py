"""`tiermem serve`, `api`, `worker` and `beat`: the commands that run tiermem's processes."""

from __future__ import annotations

import os
import signal
from typing import Annotated

import typer

from services.cli.common import configure_logging, console, own_vector_folder
from services.cli.settings import load_settings
from shared.ops.queue_names import QUEUES, REPLAY


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
    configure_logging(settings)
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    own_vector_folder(settings, "serve", lambda: runtime.vectors)
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
    configure_logging(settings)
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


def worker(
    queues: Annotated[
        str,
        typer.Option(help="comma-separated; maintenance: outbox sweeps, webhook deliveries"),
    ] = ",".join(QUEUES),
    concurrency: Annotated[int | None, typer.Option()] = None,
    pool: Annotated[str | None, typer.Option(help="threads | prefork | solo")] = None,
    beat: Annotated[
        bool, typer.Option(help="also run beat's schedule (outbox sweeps, webhook dispatch)")
    ] = False,
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
    own_vector_folder(
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


def beat(loglevel: Annotated[str, typer.Option()] = "INFO") -> None:
    """Celery beat: schedules the outbox sweeper and the webhook dispatch."""
    settings = load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)  # beat's schedule file
    from workers.celery_app import make_celery

    make_celery(settings).start(["beat", "--loglevel", loglevel])
