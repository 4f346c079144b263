"""Group commit for POST /turns: one writer thread per process stores the queued turns together.

Why: when every request thread opened its own write transaction, the threads queued twice
under load, for SQLite's single write lock and for the interpreter lock, and a transaction
whose thread lost the interpreter held the write lock meanwhile; p99 latency was that
queue (docs/benchmarks.md). One thread that takes every turn waiting and stores them in
one transaction pays for the transaction (connection, write gate, BEGIN, COMMIT) once per
batch, and only it ever holds this process's write lock.

A turn that fails inside a batch (a session of another user, a constraint race on
PostgreSQL) rolls the whole batch back; its turns are then stored one transaction each,
so every caller gets exactly the outcome it would have had alone. A database error (locked
past the busy timeout, connection lost, pool exhausted) fails every turn of the batch with
503: it would fail them again one by one.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from sqlalchemy.engine import Engine
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session

from shared.config import Settings
from shared.errors import Unavailable
from shared.records.ingest import IngestRequest, IngestResult, ingest_batch
from shared.records.models import TurnAccepted, TurnIn
from shared.records.turns import turn_accepted, turn_request

log = logging.getLogger(__name__)


# What a client told "not stored" should do; a resend is safe with external_ids.
RESEND = "send it again (with external_ids a turn already stored is not stored twice)"
_Item = tuple[IngestRequest, "Future[IngestResult]"]
_Outcome = IngestResult | Exception
# The database's state, not a turn's: every turn of the batch would fail alike.
_DATABASE_ERRORS = (OperationalError, InterfaceError, PoolTimeout)


class TurnWriter:
    """`submit()` from any thread; the future resolves once the turn is committed.

    Two threads: the writer stores batches; the sender calls `after_commit(run_ids)` (the
    enqueue) for each committed batch, then resolves its futures, so a 202 still means the
    job is on the broker, and a slow broker does not hold up the next transaction.
    `after_commit` does not raise: `TaskQueue.extract` leaves runs it cannot send pending in
    SQL for the outbox sweeper. A database error fails the batch's turns with `Unavailable`
    (503, retry).
    """

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        after_commit: Callable[[list[str]], None],
        max_batch: int = 64,
        timeout_s: float = 30.0,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._engine = engine
        self._settings = settings
        self._after_commit = after_commit
        self._max_batch = max_batch
        self._timeout_s = timeout_s
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._committed: queue.SimpleQueue[list[tuple[_Item, _Outcome]] | None] = (
            queue.SimpleQueue()
        )
        self._closed = False
        self._closing = threading.Lock()  # no turn slips in behind the stop marker
        self._threads = [
            threading.Thread(target=self._write, name="turn-writer", daemon=True),
            threading.Thread(target=self._send, name="turn-sender", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, request: IngestRequest) -> Future[IngestResult]:
        future: Future[IngestResult] = Future()
        with self._closing:
            if self._closed:
                raise Unavailable("the API is shutting down; send the turn again")
            self._queue.put((request, future))
        return future

    async def store(self, request: IngestRequest) -> IngestResult:
        """`submit` for a coroutine, giving up after `timeout_s` with 503. A turn the writer
        had not taken yet is then dropped; one it had may still be stored."""
        try:
            return await asyncio.wait_for(
                asyncio.wrap_future(self.submit(request)), self._timeout_s
            )
        except TimeoutError:
            raise Unavailable(
                f"the turn was not stored within {self._timeout_s:g}s "
                f"(TIERMEM_DATABASE__TURN_TIMEOUT_S); {RESEND}"
            ) from None

    async def store_turn(
        self, turn: TurnIn, *, tenant_id: str, session_external_id: str
    ) -> TurnAccepted:
        """A turn as POST /v1/sessions/{id}/turns and MCP's add_memory take it: checked (bad
        input never joins a batch), stored, its extraction queued."""
        request = turn_request(
            turn,
            tenant_id=tenant_id,
            session_external_id=session_external_id,
            settings=self._settings,
        )
        return turn_accepted(request, await self.store(request))

    def close(self, timeout_s: float = 10.0) -> bool:
        """Store and send what is queued, then stop; False if that took over `timeout_s`."""
        with self._closing:
            self._closed = True
            self._queue.put(None)
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0))
        return not any(thread.is_alive() for thread in self._threads)

    def _write(self) -> None:
        while (batch := self._next_batch()) is not None:
            if batch:
                try:
                    outcomes = self._store(batch)
                except BaseException as exc:  # never leave a caller waiting forever
                    log.exception("turn writer failed a batch of %d", len(batch))
                    outcomes = [exc if isinstance(exc, Exception) else RuntimeError()] * len(batch)
                self._committed.put(list(zip(batch, outcomes, strict=True)))
        self._committed.put(None)

    def _next_batch(self) -> list[_Item] | None:
        """The turns waiting, at most max_batch; None once closed and drained. A turn whose
        caller gave up (its future cancelled) is dropped; the rest can no longer be
        cancelled, so resolving them cannot fail."""
        first = self._queue.get()
        if first is None:
            return None
        items = [first]
        while len(items) < self._max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)  # stop after this batch
                break
            items.append(item)
        return [item for item in items if item[1].set_running_or_notify_cancel()]

    def _store(self, batch: list[_Item]) -> Sequence[_Outcome]:
        requests = [request for request, _ in batch]
        if len(requests) > 1:
            try:
                return self._store_together(requests)
            except _DATABASE_ERRORS as exc:
                return [_unavailable(exc) for _ in requests]
            except Exception:
                pass  # a turn's own error (say, a session of another user): each alone
        return [self._store_alone(request) for request in requests]

    def _store_together(self, requests: list[IngestRequest]) -> list[IngestResult]:
        with Session(self._engine) as session:  # Core rows only: nothing to expire
            results = ingest_batch(session=session, settings=self._settings, requests=requests)
            session.commit()
        return results

    def _store_alone(self, request: IngestRequest) -> _Outcome:
        try:
            return self._store_together([request])[0]
        except _DATABASE_ERRORS as exc:
            return _unavailable(exc)
        except Exception as exc:
            return exc

    def _send(self) -> None:
        while (done := self._committed.get()) is not None:
            run_ids = [
                run.id
                for _, outcome in done
                if isinstance(outcome, IngestResult)
                for run in outcome.runs
            ]
            if run_ids:
                self._after_commit(run_ids)
            for (_, future), outcome in done:
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)


def _unavailable(exc: Exception) -> Unavailable:
    error = Unavailable(
        f"the database could not store the turn right now; {RESEND}",
        details={"reason": str(getattr(exc, "orig", exc))[:200]},
    )
    error.__cause__ = exc
    return error
