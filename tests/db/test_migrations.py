"""The alembic migrations build exactly the schema the SQLModel tables describe, on SQLite
and on PostgreSQL (full-text objects created by raw SQL in 0003 aside)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import shared.db.models  # noqa: F401  (registers the tables)
from shared.db.engine import make_engine
from shared.db.migrate import upgrade_to_head
from tests.factories import make_settings


def _ours(diff: Any) -> bool:
    """Diffs that are not the full-text search objects 0003 makes with raw SQL."""
    text = repr(diff)
    return "messages_fts" not in text and "content_tsv" not in text


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_migrations_match_the_models(
    tmp_path: Path, database: str, request: pytest.FixtureRequest
) -> None:
    url = {"database_url": request.getfixturevalue("pg_url")} if database == "postgres" else {}
    settings = make_settings(tmp_path, **url)
    upgrade_to_head(settings)
    engine = make_engine(settings)
    try:
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    finally:
        engine.dispose()
    assert [d for d in diffs if _ours(d)] == []
