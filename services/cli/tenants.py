"""`tiermem tenants create` and `tiermem tenants key`: tenants and their API keys."""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.common import console
from services.cli.settings import load_settings
from shared.errors import DomainError

tenants_cli = typer.Typer(help="Tenants and their API keys.", no_args_is_help=True)


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
