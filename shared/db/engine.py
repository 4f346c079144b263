"""One SQLAlchemy engine per process: SQLite in WAL mode with a busy timeout, or PostgreSQL."""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, create_engine

from shared.config import Settings

log = logging.getLogger(__name__)

# Execution option naming a connection whose transactions only read.
READ_ONLY = "tiermem_read_only"
# How often a writer retries while another process writes (see WriteGate): from 0.5 ms,
# doubling up to 2 ms.
OTHER_PROCESS_POLL_S = 0.0005
OTHER_PROCESS_POLL_MAX_S = 0.002


def make_engine(settings: Settings) -> Engine:
    url = make_url(settings.sqlalchemy_url)
    kwargs: dict[str, Any] = {"echo": settings.database.echo}
    sqlite = url.get_backend_name() == "sqlite"
    sqlite_file: Path | None = None
    if sqlite:
        if url.database and url.database != ":memory:":
            # Resolved: two spellings of one path must meet at one write-gate lock file.
            sqlite_file = Path(url.database).resolve()
            sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        # API threads and worker threads share the engine; writes queue on a WriteGate.
        kwargs["connect_args"] = {
            "check_same_thread": False,
            "timeout": 30,
            "factory": GatedConnection,
        }
    else:
        # A server may drop idle connections; a file cannot (no ping per checkout there).
        kwargs["pool_pre_ping"] = True
        kwargs["pool_size"] = settings.database.pool_size
        kwargs["max_overflow"] = settings.database.pool_size
    engine = create_engine(url, **kwargs)
    event.listen(engine, "before_cursor_execute", _refuse_writes_when_read_only)
    if sqlite:
        _tune_sqlite(engine, settings.database.busy_timeout_ms, sqlite_file)
    return engine


def _refuse_writes_when_read_only(
    conn: Any, _cursor: Any, statement: str, _params: Any, context: Any, _many: bool
) -> None:
    # A write through read_only(engine) would work until it met a writer, then fail with
    # "database is locked" at once (its plain BEGIN holds no write lock): fail every time.
    writes = context is not None and (context.isinsert or context.isupdate or context.isdelete)
    if writes and conn.get_execution_options().get(READ_ONLY):
        raise ReadOnlySessionError(
            f"a session of read_only(engine) tried to write ({statement.split()[0]}); "
            "open the session on runtime.engine"
        )


class ReadOnlySessionError(RuntimeError):
    """A bug in the caller: reads and writes belong in a session of the plain engine."""


# Per-process state that a forked child (Celery's prefork pool) must start afresh.
_per_process: weakref.WeakSet[WriteGate | WalCheckpointer] = weakref.WeakSet()


class WriteGate:
    """The queue for SQLite's single write lock, within a process and across processes.

    A writer SQLite finds locked waits by sleeping and retrying (up to 100 ms between
    tries), so with many threads the lock often sits free while they all sleep, and two
    processes writing at once (`tiermem api --workers 2`) ran slower than one. Threads of a
    process queue on a lock here and the next starts the moment the last one's COMMIT or
    ROLLBACK is done; the thread at the head of the queue then takes an advisory lock on a
    file beside the database (`<database>-writegate`), retried every 0.5–2 ms while another
    process holds it, before `BEGIN IMMEDIATE`. Either wait ends after the busy timeout
    with "database is locked", as SQLite's own would.
    """

    def __init__(self, timeout_s: float, lock_file: Path | None) -> None:
        self._timeout_s = timeout_s
        self._lock_file = lock_file
        self._file: BinaryIO | None = None
        self._start_afresh()
        _per_process.add(self)

    def _start_afresh(self) -> None:
        """In a new process (and a forked child): the parent's lock may be held at the fork,
        and a flock on the parent's open file would be the parent's own lock."""
        self._lock = threading.Lock()
        if self._file is not None:
            self._file.close()  # the child's copy only: the parent's lock stays
        self._file = None
        self._conn: int | None = None

    def enter(self, dbapi_conn: sqlite3.Connection) -> None:
        # No exception for a second write transaction in the same thread: it could never
        # get SQLite's lock from the first anyway, and thread ids mislead under FastAPI,
        # whose dependencies and endpoint run one request on different threads.
        deadline = time.monotonic() + self._timeout_s
        if not self._lock.acquire(timeout=self._timeout_s):
            raise self._locked("this process's other writers")
        try:
            if not self._lock_other_processes_out(deadline):
                raise self._locked("another process")
        except BaseException:
            self._lock.release()
            raise
        self._conn = id(dbapi_conn)

    def _lock_other_processes_out(self, deadline: float) -> bool:
        if self._lock_file is None:
            return True  # an in-memory database: no other process sees it
        if self._file is None:
            self._file = open(self._lock_file, "ab")  # noqa: SIM115  # held for the process
        pause = OTHER_PROCESS_POLL_S
        while True:
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(pause)
                pause = min(pause * 2, OTHER_PROCESS_POLL_MAX_S)

    def _locked(self, holder: str) -> OperationalError:
        # As SQLite's own busy timeout reports it, so callers' retries treat it alike.
        reason = sqlite3.OperationalError(
            f"database is locked: {holder} held it for {self._timeout_s:g}s"
        )
        return OperationalError("BEGIN IMMEDIATE", None, reason)

    def holds(self, dbapi_conn: sqlite3.Connection) -> bool:
        return self._conn == id(dbapi_conn)

    def leave(self, dbapi_conn: sqlite3.Connection, *, closed: bool = False) -> None:
        if self.holds(dbapi_conn) and (closed or not dbapi_conn.in_transaction):
            self._conn = None
            if self._file is not None:
                fcntl.flock(self._file, fcntl.LOCK_UN)
            self._lock.release()


class WalCheckpointer:
    """Copies the WAL back into the database file on a thread of its own, shortly after
    commits, so that a COMMIT seldom has to.

    SQLite checkpoints inside the COMMIT that grows the WAL past 1,000 pages (every ~30
    turns here, each writing ~35 pages across its indexes and the full-text index), and
    that COMMIT took 5-7 ms instead of ~1 while holding the write gate: a queue behind it
    at 200 turns/s. A PASSIVE checkpoint neither waits for nor blocks readers and writers,
    so this thread's run, `interval_s` after a commit, costs the writers nothing; when it
    has copied everything, the next writer starts the WAL over. Under back-to-back writes
    it cannot catch up, and the COMMIT's own checkpoint (left on) remains the backstop.
    The thread starts on a commit and ends after `idle_s` without one (and so in forked
    children, which start their own).
    """

    def __init__(self, database: Path, *, interval_s: float = 0.02, idle_s: float = 5.0) -> None:
        self._database = database
        self._interval_s = interval_s
        self._idle_s = idle_s
        self._start_afresh()
        _per_process.add(self)

    def _start_afresh(self) -> None:
        """Also in a forked child: the parent's thread is not there, and its lock may have
        been held at the fork."""
        self._committed = threading.Event()
        self._starting = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def committed(self) -> None:
        self._committed.set()
        if not self.running:
            with self._starting:
                if not self.running:
                    name = f"wal-checkpoint {self._database}"
                    self._thread = threading.Thread(target=self._run, name=name, daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._database, isolation_level=None)
        except sqlite3.Error:
            log.warning("WAL checkpointer could not open %s", self._database, exc_info=True)
            return
        try:
            while self._committed.wait(self._idle_s):
                time.sleep(self._interval_s)  # the commits of the next moment, in one run
                self._committed.clear()
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            log.warning("WAL checkpoint failed; COMMITs checkpoint instead", exc_info=True)
        finally:
            conn.close()


class GatedConnection(sqlite3.Connection):
    """A SQLite connection that hands the write gate on once its transaction has ended,
    then tells the WAL checkpointer."""

    gate: WriteGate | None = None
    checkpointer: WalCheckpointer | None = None

    def commit(self) -> None:
        wrote = self.gate is not None and self.gate.holds(self)  # not a read-only session
        try:
            super().commit()
        finally:
            self._leave()
        if wrote and self.checkpointer is not None:
            self.checkpointer.committed()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self._leave()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._leave(closed=True)

    def _leave(self, *, closed: bool = False) -> None:
        if self.gate is not None:
            self.gate.leave(self, closed=closed)


def _start_afresh_after_fork() -> None:
    for state in list(_per_process):
        state._start_afresh()


os.register_at_fork(after_in_child=_start_afresh_after_fork)


def _tune_sqlite(engine: Engine, busy_timeout_ms: int, database: Path | None) -> None:
    """`database` is the file (None in memory)."""
    lock_file = database.with_name(f"{database.name}-writegate") if database else None
    gate = WriteGate(busy_timeout_ms / 1000, lock_file)
    checkpointer = WalCheckpointer(database) if database else None

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (see _on_begin).
        dbapi_conn.isolation_level = None
        dbapi_conn.gate = gate
        dbapi_conn.checkpointer = checkpointer
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
        # Sessions of read_only(engine) only read: a plain BEGIN, so in WAL mode they never
        # wait for a writer. Any other transaction may write: a deferred one that reads,
        # then writes, fails with SQLITE_BUSY (no wait) when another writer committed in
        # between, so IMMEDIATE takes the write lock up front, after this process's queue
        # (WriteGate). Keep them short: workers never hold one across an LLM call.
        if conn.get_execution_options().get(READ_ONLY):
            conn.exec_driver_sql("BEGIN")
            return
        dbapi_conn = conn.connection.dbapi_connection
        gate.enter(dbapi_conn)
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            gate.leave(dbapi_conn)
            raise


def read_only(engine: Engine) -> Engine:
    """The same engine and pool, for sessions that only read (see _on_begin); a write
    through it raises ReadOnlySessionError."""
    reader: Engine = engine.execution_options(**{READ_ONLY: True})
    return reader


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
