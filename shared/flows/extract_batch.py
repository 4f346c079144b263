"""A session's waiting turns extracted together (ADR 0024): the batch check claims them when
they are due, then one LLM call reads them in order and each turn's run gets its outcome.

With TIERMEM_EXTRACTION__BATCH_TURNS above 1, shared.flows.extract_turn parks each stored
live turn ("waiting") and says when its session's batch is due; the worker sends the check
then. Claiming is idempotent (shared.records.batches): a check sent twice, or by two
workers at once, claims each turn once. A batch is then extracted like one run: claimed
run by run, a transient failure retried for every turn not finished, a permanent one
failing each of them with the reason (retried by POST /v1/ops/runs/retry, one turn per
call, or by replay).
"""

from __future__ import annotations

import functools
import time

from sqlalchemy.exc import OperationalError

from shared.db.engine import session_scope
from shared.db.models import ExtractionRun
from shared.errors import DomainError, PermanentError, TransientError, Unavailable
from shared.extraction.base import ExtractionResult, TurnInput
from shared.extraction.batch import BatchExtractor
from shared.flows.extract_turn import (
    RunOutcome,
    batch_rule,
    claim_run,
    decide_compression,
    fail_run,
    guarded,
    reads_context,
    record_error,
    settle,
    with_known_facts,
)
from shared.records.batches import claim_due
from shared.runtime import Runtime


def collect_session(runtime: Runtime, chat_id: str) -> list[list[str]]:
    """The session's waiting turns claimed in batches (run ids, turn order) when due; []
    when not due yet, or already claimed. Send each batch after this returns."""
    try:
        with session_scope(runtime.engine) as session:
            return claim_due(session, session_id=chat_id, rule=batch_rule(runtime))
    except OperationalError as exc:
        raise TransientError(f"database error while claiming a batch: {exc.orig}") from exc


def run_batch_extraction(
    runtime: Runtime, run_ids: list[str], *, last_attempt: bool = True, worker: str | None = None
) -> list[RunOutcome]:
    """Each run's outcome, in order, `compress_next` decided once per session; the runs
    already finished return theirs at once. Raises TransientError (after recording it on
    every run left) when a retry may help."""
    started = time.perf_counter()
    outcomes: dict[str, RunOutcome] = {}
    claimed: list[tuple[TurnInput, ExtractionRun]] = []
    for run_id in run_ids:
        got = claim_run(runtime, run_id, worker)
        if isinstance(got, RunOutcome):
            outcomes[run_id] = got
        else:
            claimed.append(got)
    if claimed:
        for outcome in _extract(runtime, claimed, started=started, last_attempt=last_attempt):
            outcomes[outcome.run_id] = outcome
    return decide_compression(runtime, [outcomes[run_id] for run_id in run_ids])


def _extract(
    runtime: Runtime,
    claimed: list[tuple[TurnInput, ExtractionRun]],
    *,
    started: float,
    last_attempt: bool,
) -> list[RunOutcome]:
    runs = [run for _, run in claimed]
    try:
        turns = [
            with_known_facts(runtime, run, turn) if reads_context(runtime) else turn
            for turn, run in claimed
        ]
        results = _results(runtime, turns)
    except (TransientError, Unavailable, PermanentError) as exc:
        return _fail_all(runtime, runs, exc, last_attempt=last_attempt)
    except OperationalError as exc:  # database locked / connection dropped: retried
        for run in runs:
            record_error(runtime, run.id, f"database: {exc.orig}", final=last_attempt)
        raise TransientError(f"database error: {exc.orig}") from exc
    except Exception as exc:
        for run in runs:  # a bug: fail visibly, as one run does (extract_turn.guarded)
            record_error(runtime, run.id, f"{type(exc).__name__}: {exc}", final=True)
        raise
    # Written in turn order, each under the user's lock as one run's facts are: a later
    # turn's fact supersedes an earlier one's as it would have one call per turn.
    return [
        guarded(
            runtime,
            run,
            functools.partial(settle, runtime, run, turn, result, started=started),
            last_attempt=last_attempt,
        )
        for run, turn, result in zip(runs, turns, results, strict=True)
    ]


def _results(runtime: Runtime, turns: list[TurnInput]) -> list[ExtractionResult]:
    extractor = runtime.extractor
    if isinstance(extractor, BatchExtractor):
        return extractor.extract_batch(turns)
    # The extractor changed since the turns were parked (no LLM any more): one by one.
    return [extractor.extract(turn) for turn in turns]


def _fail_all(
    runtime: Runtime, runs: list[ExtractionRun], exc: DomainError, *, last_attempt: bool
) -> list[RunOutcome]:
    """The batch call's error recorded on each of its runs (extract_turn.fail_run); raised
    for the task to retry the batch when it is transient and attempts remain."""
    outcomes: list[RunOutcome] = []
    retry: TransientError | None = None
    for run in runs:
        try:
            outcomes.append(fail_run(runtime, run, exc, last_attempt=last_attempt))
        except TransientError as raised:
            retry = raised
    if retry is not None:
        raise retry
    return outcomes
