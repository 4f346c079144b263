"""Group commit for POST /turns: one writer thread per process stores the queued turns together.

Why: when every request thread opened its own write transaction, the threads queued twice
under load, for SQLite's single write lock and for the interpreter lock, and a transaction
whose thread lost the interpreter held the write lock meanwhile; p99 latency was that
queue (docs/benchmarks.md). One thread that takes every turn waiting and stores them in
one transaction pays for the transaction (connection, write gate, BEGIN, COMMIT) once per
batch, and only it ever holds this process's write lock.

A turn that fails inside a batch (a session of another user, a constraint race on
PostgreSQL) rolls the whole batch back; its turns are then stored one transaction each,
so every caller gets exactly the outcome it would have had alone. An OperationalError
(the database locked past its busy timeout, or gone) fails every turn of the batch: it
would fail them again one by one.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from shared.config import Settings
from shared.ingest import IngestRequest, IngestResult, ingest_batch
from shared.outbox import send_committed

log = logging.getLogger(__name__)


_Item = tuple[IngestRequest, "Future[IngestResult]"]


class TurnWriter:
    """`submit()` from any thread; the future resolves once the turn is committed.

    `after_commit(run_ids)` gets the new extraction runs of each committed batch (the
    enqueue), before the futures resolve: a 202 means the job is on the broker, as it did
    before batching. If it raises, the runs stay pending in SQL for the outbox sweeper.
    """

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        after_commit: Callable[[list[str]], None],
        max_batch: int = 64,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._engine = engine
        self._settings = settings
        self._after_commit = after_commit
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._closed = False
        self._closing = threading.Lock()  # no turn slips in behind the stop marker
        self._thread = threading.Thread(target=self._run, name="turn-writer", daemon=True)
        self._thread.start()

    def submit(self, request: IngestRequest) -> Future[IngestResult]:
        future: Future[IngestResult] = Future()
        with self._closing:
            if self._closed:
                raise RuntimeError("the turn writer is closed")
            self._queue.put((request, future))
        return future

    def close(self, timeout_s: float = 10.0) -> None:
        """Store what is queued, then stop the thread."""
        with self._closing:
            self._closed = True
            self._queue.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
            try:
                self._store(batch)
            except BaseException as exc:  # never leave a caller waiting forever
                log.exception("turn writer failed a batch of %d", len(batch))
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)

    def _store(self, batch: list[_Item]) -> None:
        if len(batch) == 1:
            outcomes: list[IngestResult | Exception] = [self._store_alone(batch[0][0])]
        else:
            try:
                outcomes = list(self._store_together([request for request, _ in batch]))
            except OperationalError as exc:  # the database's state, not a turn's: all fail
                outcomes = [exc] * len(batch)
            except Exception:
                outcomes = [self._store_alone(request) for request, _ in batch]
        run_ids = [
            run.id
            for outcome in outcomes
            if isinstance(outcome, IngestResult)
            for run in outcome.runs
        ]
        send_committed(self._after_commit, run_ids)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _store_together(self, requests: list[IngestRequest]) -> list[IngestResult]:
        with Session(self._engine, expire_on_commit=False) as session:
            results = ingest_batch(session=session, settings=self._settings, requests=requests)
            session.commit()
        return results

    def _store_alone(self, request: IngestRequest) -> IngestResult | Exception:
        try:
            return self._store_together([request])[0]
        except Exception as exc:
            return exc
