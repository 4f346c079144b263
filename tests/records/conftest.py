"""Fixtures of the SQL records' tests: a migrated Runtime on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.db.migrate import upgrade_to_head
from shared.runtime import Runtime
from tests.factories import fresh_pg_database, make_settings


@pytest.fixture(
    name="runtime", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def runtime_fixture(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Runtime]:
    if request.param == "postgres":
        with fresh_pg_database() as url:
            yield from _runtime(tmp_path, database_url=url)
    else:
        yield from _runtime(tmp_path)


def _runtime(tmp_path: Path, **overrides: str) -> Iterator[Runtime]:
    settings = make_settings(tmp_path, **overrides)
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    try:
        yield runtime
    finally:
        runtime.close()
