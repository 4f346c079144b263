"""Stored turns extracted in-process as the workers would, one call per turn or a session's
waiting turns together (TIERMEM_EXTRACTION__BATCH_TURNS, ADR 0024): what the benchmarks
call in place of `run_extraction`. No clock here: a batch is extracted when N turns wait,
and `flush` extracts what still waits, as if each session had fallen quiet."""

from __future__ import annotations

import datetime as dt

from shared.db.engine import session_scope
from shared.db.models import utcnow
from shared.errors import DomainError
from shared.flows.extract_batch import run_batch_extraction
from shared.flows.extract_turn import RunOutcome, batch_rule, run_extraction
from shared.records.batches import claim_due
from shared.records.runs import WAITING
from shared.runtime import Runtime

# The benchmarks' quiet time: long enough that no batch is ever due by the clock.
QUIET_S = 3600.0


class TurnExtraction:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.rule = batch_rule(runtime)
        self.sessions: set[str] = set()

    def extract(self, run_id: str) -> list[RunOutcome]:
        """The outcomes that ended now: this run's, or every run of the batch it completed;
        [] while it waits for its session's batch."""
        outcome = run_extraction(self.runtime, run_id)
        if outcome.status != WAITING or outcome.batch_chat_id is None:
            return [outcome]
        self.sessions.add(outcome.batch_chat_id)
        return self._due(outcome.batch_chat_id) if outcome.batch_due_in_s == 0 else []

    def flush(self) -> list[RunOutcome]:
        """Every waiting turn extracted, as if its session had fallen quiet."""
        outcomes = [o for s in sorted(self.sessions) for o in self._due(s, quiet=True)]
        self.sessions.clear()
        return outcomes

    def _due(self, session_id: str, *, quiet: bool = False) -> list[RunOutcome]:
        later = utcnow() + dt.timedelta(seconds=self.rule.quiet_s + 1) if quiet else None
        with session_scope(self.runtime.engine) as session:
            batches = claim_due(session, session_id=session_id, rule=self.rule, now=later)
        outcomes: list[RunOutcome] = []
        for run_ids in batches:
            try:
                outcomes += run_batch_extraction(self.runtime, run_ids)
            except DomainError:  # a transient error the worker would retry: recorded on the runs
                outcomes += [RunOutcome(run_id, "failed") for run_id in run_ids]
        return outcomes
