"""One SQLAlchemy engine per process: SQLite in WAL mode with a busy timeout, or PostgreSQL."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlmodel import Session, create_engine

from shared.config import Settings

log = logging.getLogger(__name__)


def make_engine(settings: Settings) -> Engine:
    url = make_url(settings.sqlalchemy_url)
    kwargs: dict[str, Any] = {"echo": settings.database.echo, "pool_pre_ping": True}
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        # API threads and worker threads share the engine; SQLite serializes writes itself.
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    else:
        kwargs["pool_size"] = settings.database.pool_size
        kwargs["max_overflow"] = settings.database.pool_size
    engine = create_engine(url, **kwargs)
    if url.get_backend_name() == "sqlite":
        _tune_sqlite(engine, settings.database.busy_timeout_ms)
    return engine


def _tune_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (see _on_begin).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        # WAL lets the API read while a worker writes; NORMAL is durable across app
        # crashes (not power loss), the usual trade for WAL.
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A deferred transaction that reads, then writes, fails with SQLITE_BUSY (no wait)
        # when another writer committed in between; IMMEDIATE takes the write lock up
        # front so concurrent writers queue on busy_timeout instead. WAL readers are not
        # blocked by it. Keep transactions short: workers never hold one across an LLM call.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session for worker code: commit on success, roll back on error."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
