"""State changes shared by every kind of background run (extraction, compression)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

from sqlalchemy.engine import Engine
from sqlmodel import Session

from shared.db.engine import session_scope
from shared.db.models import CompressionRun, ExtractionRun, utcnow

log = logging.getLogger(__name__)

Run = TypeVar("Run", ExtractionRun, CompressionRun)
_KIND = {ExtractionRun: "extraction", CompressionRun: "compression"}


def record_error(run: ExtractionRun | CompressionRun, error: str, *, final: bool) -> None:
    """`retrying` while attempts remain (the task retries), `failed` with the reason after."""
    run.status = "failed" if final else "retrying"
    run.error = error[:2000]
    run.updated_at = utcnow()
    if final:
        run.finished_at = run.updated_at


def record_run_error(
    engine: Engine,
    kind: type[Run],
    run_id: str,
    error: str,
    *,
    final: bool,
    fields: Mapping[str, object] | None = None,
    then: Callable[[Session, Run], None] | None = None,
) -> None:
    """record_error on the stored run in a transaction of its own, logged; `fields` are set
    on the run first and `then` runs in the same transaction. A run gone meanwhile is skipped."""
    log.warning("%s run %s failed: %s", _KIND[kind], run_id, error, extra={"run_id": run_id})
    with session_scope(engine) as session:
        run = session.get(kind, run_id)
        if run is None:
            return
        for key, value in (fields or {}).items():
            setattr(run, key, value)
        record_error(run, error, final=final)
        session.add(run)
        if then is not None:
            then(session, run)
