"""One extraction run: claim → extract (no transaction open) → embed → write under the user lock.

Idempotent: a run already done returns at once, and a rerun of a half-finished one
re-derives the same fact ids, so nothing is counted or stored twice. With batching on
(TIERMEM_EXTRACTION__BATCH_TURNS > 1, ADR 0024) a live turn is parked instead, and
shared.flows.extract_batch extracts it with its session's other waiting turns, settling
each run with `settle` as here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Session

from shared.db.engine import session_scope
from shared.db.models import ChatSession, ExtractionRun, Message, User, utcnow
from shared.errors import DomainError, PermanentError, TransientError, Unavailable
from shared.extraction.base import ExtractionResult, TurnInput
from shared.extraction.batch import BatchExtractor
from shared.flows.compress_session import over_trigger
from shared.memory.history.indexing import index_messages, turn_message_ids
from shared.memory.names import display_name
from shared.memory.turn_context import earlier_messages, known_facts
from shared.memory.writer import provenance_for, write_facts
from shared.records.batches import BatchRule, due_in, park_run
from shared.records.events import EXTRACTION_DROPPED, EXTRACTION_FAILED, record_event
from shared.records.runs import WAITING, record_run_error
from shared.runtime import Runtime

log = logging.getLogger(__name__)

FINISHED = ("done", "skipped", "staged")
# The model answered with items and every one was dropped: not "nothing worth remembering"
# but a run a person looks at and retries (ops lists it beside the failed ones).
DROPPED = "dropped"
# Replay modes that extract into the run's `staged` field instead of writing memory.
STAGING_MODES = ("dry_run", "rebuild")


def staged_payload(result: ExtractionResult, turn: TurnInput) -> dict[str, object]:
    return {
        "facts": [fact.model_dump(mode="json") for fact in result.facts],
        "seen_at": turn.session_date.isoformat(),
        "extractor": result.extractor,
        "extractor_version": result.extractor_version,
        "model": result.model,
    }


@dataclass
class RunOutcome:
    run_id: str
    status: str
    added: int = 0
    merged: int = 0
    superseded: int = 0
    # The chat (internal id) whose history this run grew (a live turn with a reply).
    history_grew_chat_id: str | None = None
    # That history is now over its compression trigger: the worker queues the session's
    # compression (decided here, once per session for a batch: `decide_compression`).
    compress_next: bool = False
    # Set when the run was parked ("waiting", ADR 0024): its session's batch is due in this
    # many seconds (0: now), so the worker sends the session's batch check then.
    batch_chat_id: str | None = None
    batch_due_in_s: float | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def index_user_messages(
    *, runtime: Runtime, tenant_id: str, user_id: str, message_ids: Sequence[str]
) -> int:
    """Write the messages into the user's message collection (index_messages, with the
    process's parts): a turn's first step here, and how a benchmark fills a history."""
    return index_messages(
        messages=runtime.messages_of(tenant_id=tenant_id, user_id=user_id),
        embedder=runtime.embedder,
        engine=runtime.engine,
        read_engine=runtime.read_engine,
        locks=runtime.user_locks,
        user_id=user_id,
        message_ids=message_ids,
    )


def run_extraction(
    runtime: Runtime, run_id: str, *, last_attempt: bool = True, worker: str | None = None
) -> RunOutcome:
    """Raises TransientError (after recording it) when a retry may help and attempts remain.

    `worker` names the Celery worker running it (ops tells a dead worker's runs by it).
    With batching on (ADR 0024) a live turn is parked instead: its outcome is "waiting",
    with when its session's batch is due (shared.flows.extract_batch)."""
    if batching(runtime):
        parked = park(runtime, run_id)
        if parked is not None:
            return parked
    started = time.perf_counter()
    claimed = claim_run(runtime, run_id, worker)
    if isinstance(claimed, RunOutcome):
        return claimed
    turn, run = claimed
    replay = run.replay_job_id is not None

    def extract() -> RunOutcome:
        if not replay:
            # History search's vectors first: a turn whose extraction fails for good is
            # still found by meaning, and a vector-store error here is retried before any
            # LLM call. (A replay re-reads turns whose messages are indexed already.)
            _index_turn(runtime, run)
        read = with_known_facts(runtime, run, turn) if reads_context(runtime) else turn
        return settle(runtime, run, read, runtime.extractor.extract(read), started=started)

    return decide_compression(runtime, [guarded(runtime, run, extract, last_attempt=last_attempt)])[
        0
    ]


def decide_compression(runtime: Runtime, outcomes: list[RunOutcome]) -> list[RunOutcome]:
    """The outcomes, `compress_next` set on those whose session's history is now over its
    compression trigger. Every path that stores a reply (turns, chat, imports) ends in an
    extraction run, so compression is checked once per turn (once per session for a batch)
    without each route having to remember it; the check (a few SQL sums) is cheaper than a
    task that would mostly find nothing to do."""
    for chat_id in {o.history_grew_chat_id for o in outcomes if o.history_grew_chat_id}:
        if over_trigger(runtime, chat_id):
            for outcome in outcomes:
                outcome.compress_next |= outcome.history_grew_chat_id == chat_id
    return outcomes


def batching(runtime: Runtime) -> bool:
    """A session's turns wait to be extracted together: batch_turns above 1, LLM extractor."""
    return runtime.settings.extraction.batch_turns > 1 and isinstance(
        runtime.extractor, BatchExtractor
    )


def batch_rule(runtime: Runtime) -> BatchRule:
    settings = runtime.settings.extraction
    return BatchRule(turns=settings.batch_turns, quiet_s=settings.batch_quiet_s)


def park(runtime: Runtime, run_id: str) -> RunOutcome | None:
    """A stored live turn waits for its session's batch, its messages indexed for history
    search meanwhile; the outcome says when the batch is due. None when the run is not one
    to park (a replay's, one claimed into a batch already, one being extracted)."""
    with Session(runtime.read_engine) as session:
        run = session.get(ExtractionRun, run_id)
    if run is None:
        return RunOutcome(run_id, "gone")
    if run.replay_job_id is not None or run.batch_id is not None:
        return None
    if run.status not in ("pending", WAITING):
        return None
    try:
        _index_turn(runtime, run)
        with session_scope(runtime.engine) as session:
            park_run(session, run_id)
        # Read after the commit: of two turns parked at once, the one committed last then
        # sees both waiting (on PostgreSQL each transaction alone would see one, and neither
        # would find its session due).
        with Session(runtime.engine) as session:
            due = due_in(session, session_id=run.session_id, rule=batch_rule(runtime))
    except (TransientError, Unavailable) as exc:  # the run stays pending: the task retries
        raise TransientError(exc.message) from exc
    except OperationalError as exc:
        raise TransientError(f"database error while parking the run: {exc.orig}") from exc
    return RunOutcome(run_id, WAITING, batch_chat_id=run.session_id, batch_due_in_s=due)


def _index_turn(runtime: Runtime, run: ExtractionRun) -> None:
    index_user_messages(
        runtime=runtime,
        tenant_id=run.tenant_id,
        user_id=run.user_id,
        message_ids=turn_message_ids(
            read_engine=runtime.read_engine,
            message_id=run.message_id,
            reply_id=run.reply_message_id,
        ),
    )


def claim_run(
    runtime: Runtime, run_id: str, worker: str | None
) -> tuple[TurnInput, ExtractionRun] | RunOutcome:
    """The run marked running and its turn, or its outcome when there is nothing to do."""
    try:
        return _claim(runtime, run_id, worker)
    except OperationalError as exc:  # database locked: the run is untouched, retry it
        raise TransientError(f"database error while claiming the run: {exc.orig}") from exc


def settle(
    runtime: Runtime,
    run: ExtractionRun,
    turn: TurnInput,
    result: ExtractionResult,
    *,
    started: float,
) -> RunOutcome:
    """What one turn's extraction result becomes: staged, skipped, done with 0 facts,
    dropped, or its facts written under the user's lock; the run finished accordingly."""
    run_id = run.id
    replay = run.replay_job_id is not None
    history_grew = run.session_id if run.reply_message_id and not replay else None
    if run.replay_mode in STAGING_MODES and not result.skipped_reason:
        # A dry run or rebuild keeps what it extracted; the job diffs or swaps it in
        # once every turn of the user is extracted (shared.flows.replay_extraction).
        outcome = RunOutcome(run_id, "staged")
        fields = {**_result_fields(result), "staged": staged_payload(result, turn)}
        _finish(runtime, run_id, outcome, result_fields=fields, started=started)
        return outcome
    if result.skipped_reason or not result.facts:
        status = "skipped" if result.skipped_reason else "done"
        outcome = RunOutcome(
            run_id, DROPPED if result.all_dropped else status, history_grew_chat_id=history_grew
        )
        fields = _result_fields(result)
        if result.all_dropped:
            fields["error"] = _dropped_error(result)
        _finish(runtime, run_id, outcome, result_fields=fields, started=started)
        return outcome
    embeddings = runtime.embedder.embed([f.content for f in result.facts])
    provenance = provenance_for(
        run,
        seen_at=turn.session_date,
        extractor=result.extractor,
        extractor_version=result.extractor_version,
        model=result.model,
    )
    facts_vectors = runtime.facts_of(tenant_id=run.tenant_id, user_id=run.user_id)
    with runtime.user_locks.hold(run.user_id), Session(runtime.engine) as session:
        written = write_facts(
            session=session,
            facts_vectors=facts_vectors,
            facts=result.facts,
            embeddings=embeddings,
            provenance=provenance,
            dedup_threshold=runtime.settings.extraction.dedup_threshold,
        )
    outcome = RunOutcome(
        run_id,
        "done",
        added=len(written.added),
        merged=len(written.merged),
        superseded=len(written.superseded),
        history_grew_chat_id=history_grew,
    )
    _finish(runtime, run_id, outcome, result_fields=_result_fields(result), started=started)
    return outcome


def guarded(
    runtime: Runtime,
    run: ExtractionRun,
    work: Callable[[], RunOutcome],
    *,
    last_attempt: bool,
) -> RunOutcome:
    """`work` on a claimed run, its errors recorded on the run: transient ones raised as
    TransientError for the task to retry, permanent ones failing the run for good."""
    try:
        return work()
    except (TransientError, Unavailable, PermanentError) as exc:
        return fail_run(runtime, run, exc, last_attempt=last_attempt)
    except IntegrityError as exc:
        # Lost a race the per-user lock should prevent (e.g. the lock expired mid-write):
        # the unique index kept the data right; the retry merges instead of inserting.
        record_error(runtime, run.id, "concurrent write to the same fact", final=last_attempt)
        raise TransientError("concurrent write to the same fact") from exc
    except OperationalError as exc:  # database locked / connection dropped
        record_error(runtime, run.id, f"database: {exc.orig}", final=last_attempt)
        raise TransientError(f"database error: {exc.orig}") from exc
    except Exception as exc:
        # A bug, not bad luck: fail visibly instead of leaving the run "running" for the
        # sweeper to resend forever.
        record_error(runtime, run.id, f"{type(exc).__name__}: {exc}", final=True)
        raise


# What an LLM error's details say about the call (shared.llm.client): the run keeps them.
_CALL_DETAILS = ("model", "response_format", "response_format_note")


def fail_run(
    runtime: Runtime, run: ExtractionRun, exc: DomainError, *, last_attempt: bool
) -> RunOutcome:
    """Transient (and Unavailable: a Qdrant server unreachable) is recorded and raised for
    the task to retry; permanent fails the run for good."""
    retry = isinstance(exc, TransientError | Unavailable)
    # An LLM error names the model it called and the response_format it asked for (all
    # three are set, so a note left by an earlier attempt does not outlive it).
    called = (
        {k: exc.details.get(k) for k in _CALL_DETAILS} if "response_format" in exc.details else {}
    )
    record_error(runtime, run.id, exc.message, final=last_attempt or not retry, fields=called)
    if retry:
        raise TransientError(exc.message) from exc
    return RunOutcome(
        run.id,
        "failed",
        history_grew_chat_id=(run.session_id if run.reply_message_id else None),
    )


def _claim(
    runtime: Runtime, run_id: str, worker: str | None
) -> tuple[TurnInput, ExtractionRun] | RunOutcome:
    with session_scope(runtime.engine) as session:
        run = session.get(ExtractionRun, run_id)
        if run is None:  # its user was deleted since: nothing to do
            return RunOutcome(run_id, "gone")
        if run.status in FINISHED:
            return RunOutcome(run_id, run.status)
        message = session.get(Message, run.message_id)
        chat = session.get(ChatSession, run.session_id)
        user = session.get(User, run.user_id)
        if message is None or chat is None or user is None:
            return RunOutcome(run_id, "gone")
        reply = session.get(Message, run.reply_message_id) if run.reply_message_id else None
        run.status = "running"
        run.worker = worker
        run.attempts += 1
        run.started_at = utcnow()
        run.updated_at = run.started_at
        session.add(run)
        _set_message_status(session, run, "running")
        speaker = _speaker(session, message)
        context = runtime.settings.extraction
        turn = TurnInput(
            user_message=message.content,
            assistant_message=reply.content if reply else None,
            session_date=message.created_at,
            user_speaker=speaker,
            assistant_speaker=(reply.speaker if reply and reply.speaker else "Assistant"),
            earlier_messages=earlier_messages(
                session,
                message,
                user_speaker=speaker,
                limit=context.context_messages if reads_context(runtime) else 0,
                max_tokens=context.context_tokens,
            ),
        )
        session.flush()
        session.expunge(run)
        return turn, run


def reads_context(runtime: Runtime) -> bool:
    """Only the LLM extractor reads the conversation; the frozen offline rules read the turn."""
    return runtime.extractor.kind == "llm"


def with_known_facts(runtime: Runtime, run: ExtractionRun, turn: TurnInput) -> TurnInput:
    """The turn with the user's active facts nearest it, for the LLM to reuse their names and
    to name what an ending ends ("I quit" → the employer it knows)."""
    limit = runtime.settings.extraction.context_facts
    if limit <= 0:
        return turn
    with Session(runtime.read_engine) as session:
        known = known_facts(
            session,
            facts=runtime.facts_of(tenant_id=run.tenant_id, user_id=run.user_id),
            embedder=runtime.embedder,
            user_id=run.user_id,
            # The message before the turn too: "I quit" is near nothing; the question it answers
            # ("How's the new job at Arup?") is near the employer.
            text=" ".join([*(text for _, text in turn.earlier_messages[-1:]), turn.user_message]),
            limit=limit,
        )
    return dataclasses.replace(turn, known_facts=known)


def _speaker(session: Session, message: Message) -> str:
    """Who the turn's facts are about, named as everywhere else (memory.names.display_name),
    or "User" while no name is known."""
    return (
        display_name(session, message.user_id, chat_id=message.session_id, speaker=message.speaker)
        or "User"
    )


_REASONS_KEPT = 10  # of a run's dropped items, the first reasons: enough to see the pattern


def _dropped_error(result: ExtractionResult) -> str:
    reasons = "; ".join(result.invalid_reasons[:3])
    again = " when asked again" if result.first_reply else ""
    return (
        f"the model returned {result.items_returned} item(s){again} and none could be kept "
        f"({result.dropped_invalid} invalid: {reasons}); retry it, or replay the turn"
    )


def _result_fields(result: ExtractionResult) -> dict[str, object]:
    # Asked again (ADR 0031): the run counts both replies' dropped items and reasons.
    replies = [r for r in (result.first_reply, result) if r is not None]
    reasons = [reason for r in replies for reason in r.invalid_reasons]
    return {
        "extractor": result.extractor,
        "extractor_version": result.extractor_version,
        "model": result.model,
        "prompt_hash": result.prompt_hash,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "llm_ms": result.llm_ms,
        "response_format": result.response_format,
        "response_format_note": result.response_format_note,
        "facts_extracted": len(result.facts),
        "facts_invalid": sum(r.dropped_invalid for r in replies),
        "facts_repaired": result.repaired,
        "dropped_reasons": reasons[:_REASONS_KEPT] or None,
        "asked_again": result.first_reply is not None,
        "ending_checks": result.ending_checks,
        "values_changed": result.values_changed,
        "skipped_reason": result.skipped_reason,
        "batch_size": result.batch_size if result.batch_size > 1 else None,
    }


def _finish(
    runtime: Runtime,
    run_id: str,
    outcome: RunOutcome,
    *,
    result_fields: dict[str, object],
    started: float,
) -> None:
    with session_scope(runtime.engine) as session:
        run = session.get(ExtractionRun, run_id)
        if run is None:
            return
        run.error = None
        for key, value in result_fields.items():
            setattr(run, key, value)
        run.status = outcome.status
        run.facts_added = outcome.added
        run.facts_merged = outcome.merged
        run.facts_superseded = outcome.superseded
        run.finished_at = utcnow()
        run.updated_at = run.finished_at
        run.duration_ms = (time.perf_counter() - started) * 1000
        session.add(run)
        _set_message_status(session, run, outcome.status)
        if outcome.status == DROPPED:
            _announce_ending(session, run, EXTRACTION_DROPPED)


def _announce_ending(session: Session, run: ExtractionRun, type_: str) -> None:
    """extraction.failed / extraction.dropped, in the transaction that ends the run (ADR
    0027). A replay's runs are the job's business (its report), not the backend's."""
    if run.replay_job_id is not None:
        return
    message = session.get(Message, run.message_id)
    chat = session.get(ChatSession, run.session_id)
    record_event(
        session,
        tenant_id=run.tenant_id,
        user_id=run.user_id,
        type_=type_,
        data={
            "job": {
                "id": run.id,
                "status": run.status,
                "attempts": run.attempts,
                "error": run.error,
                "message_id": run.message_id,
                "session_id": chat.external_id if chat else None,
                "message_external_id": message.external_id if message else None,
            }
        },
    )


def record_error(
    runtime: Runtime,
    run_id: str,
    error: str,
    *,
    final: bool,
    fields: dict[str, object] | None = None,
) -> None:
    """The run's error (shared.records.runs), and the message's status follows its live run."""
    record_run_error(
        runtime.engine,
        ExtractionRun,
        run_id,
        error,
        final=final,
        fields=fields,
        then=_after_error,
    )


def _after_error(session: Session, run: ExtractionRun) -> None:
    _set_message_status(session, run, run.status)
    if run.status == "failed":
        _announce_ending(session, run, EXTRACTION_FAILED)


def _set_message_status(session: Session, run: ExtractionRun, status: str) -> None:
    if run.replay_job_id is not None:
        return  # the message's status is its live extraction's
    message = session.get(Message, run.message_id)
    if message is not None:
        message.extraction_status = status
        session.add(message)
