"""SQLite under many threads: writers queue on the process's WriteGate, readers never wait."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, event, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Session

from shared.db.engine import (
    GatedConnection,
    ReadOnlySessionError,
    WalCheckpointer,
    WriteGate,
    make_engine,
    read_only,
)
from tests import processes
from tests.factories import make_settings

THREADS = 16
counter = Table(
    "counter", MetaData(), Column("id", Integer, primary_key=True), Column("n", Integer)
)
WRITES = 25


def _engine(tmp_path: Path, busy_timeout_ms: int = 10_000) -> Engine:
    engine = make_engine(make_settings(tmp_path, database={"busy_timeout_ms": busy_timeout_ms}))
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)"))
        conn.execute(text("INSERT INTO counter VALUES (1, 0)"))
    return engine


def _set(engine: Engine, value: int) -> None:
    """One committed write of the counter."""
    with Session(engine) as session:
        session.execute(text("UPDATE counter SET n = :v WHERE id = 1"), {"v": value})
        session.commit()


def _count(engine: Engine) -> int:
    with Session(read_only(engine)) as session:
        n: int = session.execute(text("SELECT n FROM counter")).scalar_one()
        return n


def test_concurrent_read_modify_write_transactions_lose_no_update(tmp_path: Path) -> None:
    engine = _engine(tmp_path)

    def bump(_: int) -> None:
        for _ in range(WRITES):
            with Session(engine) as session:
                n = session.execute(text("SELECT n FROM counter WHERE id = 1")).scalar_one()
                session.execute(text("UPDATE counter SET n = :n WHERE id = 1"), {"n": n + 1})
                session.commit()

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(bump, range(THREADS)))

    assert _count(engine) == THREADS * WRITES
    engine.dispose()


@contextmanager
def _open_write(engine: Engine, value: int, *, commit: bool) -> Iterator[None]:
    """Another thread holds a write transaction (and SQLite's write lock) for the block."""
    writing, done = threading.Event(), threading.Event()

    def hold() -> None:
        with Session(engine) as session:
            session.execute(text("UPDATE counter SET n = :v WHERE id = 1"), {"v": value})
            writing.set()
            done.wait(10)
            session.commit() if commit else session.rollback()

    writer = threading.Thread(target=hold)
    writer.start()
    try:
        assert writing.wait(5)
        yield
        assert writer.is_alive()  # still holding when the block ended
    finally:
        done.set()
        writer.join()


def test_a_reader_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    reader = read_only(engine)
    # WAL: the reader sees the last committed state, not the open write; a write
    # transaction here would queue behind the writer until the block ends.
    with _open_write(engine, 42, commit=True), Session(reader) as session:
        assert session.execute(text("SELECT n FROM counter")).scalar_one() == 0
    assert _count(engine) == 42
    engine.dispose()


def test_a_writer_held_up_past_the_busy_timeout_gets_a_clear_error(tmp_path: Path) -> None:
    engine = _engine(tmp_path, busy_timeout_ms=200)
    with (
        _open_write(engine, 1, commit=False),
        Session(engine) as session,
        pytest.raises(OperationalError, match="locked"),
    ):
        session.execute(text("UPDATE counter SET n = 2 WHERE id = 1"))
    # The writer rolled back and let go: the next write goes through, nothing was lost.
    with Session(engine) as session:
        session.execute(text("UPDATE counter SET n = n + 5 WHERE id = 1"))
        session.commit()
        assert session.execute(text("SELECT n FROM counter")).scalar_one() == 5
    engine.dispose()


def test_a_failed_transaction_and_a_closed_connection_let_go_of_the_gate(tmp_path: Path) -> None:
    engine = _engine(tmp_path, busy_timeout_ms=2_000)
    with Session(engine) as session, pytest.raises(IntegrityError):
        session.execute(text("INSERT INTO counter VALUES (1, 0)"))  # duplicate key
    # rolled back on the way out: another thread can write
    _write_from_another_thread(engine, 7)

    with engine.connect() as conn:
        conn.execute(text("UPDATE counter SET n = 8 WHERE id = 1"))
        assert isinstance(conn.connection.dbapi_connection, GatedConnection)
        conn.invalidate()  # closes the DBAPI connection mid-transaction
    _write_from_another_thread(engine, 9)
    engine.dispose()


def _write_from_another_thread(engine: Engine, value: int) -> None:
    with ThreadPoolExecutor(1) as pool:
        pool.submit(_set, engine, value).result(timeout=5)
    assert _count(engine) == value


_OTHER_PROCESS = """
import sys
from sqlalchemy import Column, Integer, MetaData, Table, text, update
from sqlmodel import Session
from shared.db.engine import (
    GatedConnection,
    ReadOnlySessionError,
    WriteGate,
    make_engine,
    read_only,
)
from tests.factories import make_settings
from pathlib import Path
engine = make_engine(make_settings(Path(sys.argv[1]), database={"busy_timeout_ms": 300}))
try:
    with Session(engine) as session:
        session.execute(text("UPDATE counter SET n = n + 1 WHERE id = 1"))
        session.commit()
    print("wrote")
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def _write_from_another_process(tmp_path: Path) -> str:
    done = processes.run(
        [sys.executable, "-c", _OTHER_PROCESS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_processes_take_turns_at_the_write_lock(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with _open_write(engine, 10, commit=True):
        # The other process queues on the gate's file lock, then gives up with its reason.
        assert "database is locked: another process held it" in _write_from_another_process(
            tmp_path
        )
    assert _write_from_another_process(tmp_path).strip() == "wrote"
    assert _count(engine) == 11
    engine.dispose()


def test_a_transaction_begun_on_one_thread_and_committed_on_another_lets_go(
    tmp_path: Path,
) -> None:
    # FastAPI runs a request's dependencies and its endpoint on different threads.
    engine = _engine(tmp_path, busy_timeout_ms=300)
    session = Session(engine)
    with ThreadPoolExecutor(1) as first, ThreadPoolExecutor(1) as second:
        first.submit(session.execute, text("UPDATE counter SET n = 3 WHERE id = 1")).result()
        # Back in the pool while that transaction is open, the first thread's next write
        # queues like any other thread's.
        with pytest.raises(OperationalError, match="other writers"):
            first.submit(_set, engine, 4).result()
        second.submit(session.commit).result()
        session.close()
        first.submit(_set, engine, 5).result()
    assert _count(engine) == 5
    engine.dispose()


def test_a_gate_that_cannot_take_its_lock_file_fails_each_writer_without_blocking_the_next(
    tmp_path: Path,
) -> None:
    gate = WriteGate(5.0, tmp_path / "missing-folder" / "db-writegate")
    conn = sqlite3.connect(":memory:")
    for _ in range(2):  # the second would wait 5 s for a leaked lock, then say "locked"
        with pytest.raises(FileNotFoundError):
            gate.enter(conn)
    conn.close()


def test_a_read_only_session_refuses_to_write(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with Session(read_only(engine)) as session, pytest.raises(ReadOnlySessionError):
        session.execute(update(counter).values(n=99))
    assert _count(engine) == 0
    engine.dispose()


def _wal_bytes(engine: Engine) -> int:
    database = Path(str(engine.url.database))
    return database.with_name(f"{database.name}-wal").stat().st_size


@pytest.mark.parametrize("checkpointer", [True, False])
def test_the_checkpointer_alone_keeps_the_wal_small(tmp_path: Path, checkpointer: bool) -> None:
    engine = _engine(tmp_path)

    @event.listens_for(engine, "connect")
    def _no_commit_checkpoints(dbapi_conn: GatedConnection, _record: object) -> None:
        # Off for this test: only the background thread may copy the WAL back.
        dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")
        if not checkpointer:
            dbapi_conn.checkpointer = None

    engine.dispose()  # connections from now on get the listener above
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB)"))
    for burst in range(3):  # ~1 MB each, then a pause the checkpointer uses
        for i in range(60):
            with Session(engine) as session:
                row = {"i": burst * 100 + i}
                session.execute(text("INSERT INTO blobs VALUES (:i, randomblob(16000))"), row)
                session.commit()
        time.sleep(0.5)
    # With the WAL copied back during each pause, each burst rewrote it from the start.
    if checkpointer:
        assert _wal_bytes(engine) < 1_500_000
    else:
        assert _wal_bytes(engine) > 2_800_000
    engine.dispose()


def test_the_checkpointer_thread_ends_when_idle_and_comes_back_on_a_commit(tmp_path: Path) -> None:
    database = tmp_path / "idle.db"
    sqlite3.connect(database).execute("PRAGMA journal_mode=WAL").fetchall()
    checkpointer = WalCheckpointer(database, interval_s=0.001, idle_s=0.1)
    checkpointer.committed()
    assert checkpointer.running
    deadline = time.monotonic() + 5
    while checkpointer.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not checkpointer.running
    checkpointer.committed()
    assert checkpointer.running
