"""Alembic hook: upgrade a database to the newest schema (at startup and `tiermem migrate`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from shared.config import Settings

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade_to_head(settings: Settings) -> None:
    from shared.db.engine import make_engine

    # make_engine creates the SQLite folder and applies the pragmas (WAL) before alembic runs.
    make_engine(settings).dispose()
    command.upgrade(alembic_config(settings.sqlalchemy_url), "head")
