"""`tiermem migrate`, `reindex`, `compact`, `repair-ids` and `sweep`: keeping the database,
the vector collections and the queue in order."""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.common import console, progress_bar
from services.cli.settings import load_settings
from shared.errors import DomainError


def migrate() -> None:
    """Upgrade the database to the newest schema (alembic upgrade head)."""
    from shared.db.migrate import upgrade_to_head

    settings = load_settings()
    upgrade_to_head(settings)
    console.print(f"database at head: {settings.sqlalchemy_url.split('@')[-1]}")


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
            with progress_bar() as progress:
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
            with progress_bar() as progress:
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


def sweep() -> None:
    """Re-enqueue extraction runs the broker lost (what beat runs every minute)."""
    settings = load_settings()
    if not settings.redis_url:
        console.print("[red]needs TIERMEM_REDIS_URL[/red]: `tiermem serve` sweeps by itself.")
        raise typer.Exit(2)
    from workers.celery_app import make_celery
    from workers.tasks.outbox import sweep_outbox

    console.print(f"re-enqueued {sweep_outbox(make_celery(settings))} runs")
