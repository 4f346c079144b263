"""Background runs (extraction, compression): their state changes, and extraction runs as the
API shows them (a job: state, attempts, the error text)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, select

from shared.db.engine import session_scope
from shared.db.models import ChatSession, CompressionRun, ExtractionRun, Message, User, utcnow
from shared.errors import NotFound

log = logging.getLogger(__name__)

Run = TypeVar("Run", ExtractionRun, CompressionRun)
# A stored turn whose extraction waits for its session's batch (ADR 0024): not started, not
# lost; the session's batch check (or the outbox sweeper) sends it.
WAITING = "waiting"
# A run in one of these may still be executed (running: its worker died; the task came back).
OPEN = ("pending", WAITING, "running", "retrying")
# Extraction runs that ended without memory to show for it, which a person retries:
# failed, and dropped (the model answered with items and none could be kept).
RETRYABLE = ("failed", "dropped")
RunStatus = Literal[
    "pending", "waiting", "running", "retrying", "done", "skipped", "dropped", "failed"
]
_KIND = {ExtractionRun: "extraction", CompressionRun: "compression"}


def _record_error(run: ExtractionRun | CompressionRun, error: str, *, final: bool) -> None:
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
    """The run's error recorded in a transaction of its own, logged; `fields` are set
    on the run first and `then` runs in the same transaction. A run gone meanwhile is skipped."""
    log.warning("%s run %s failed: %s", _KIND[kind], run_id, error, extra={"run_id": run_id})
    with session_scope(engine) as session:
        run = session.get(kind, run_id)
        if run is None:
            return
        for key, value in (fields or {}).items():
            setattr(run, key, value)
        _record_error(run, error, final=final)
        session.add(run)
        if then is not None:
            then(session, run)


class JobPublic(BaseModel):
    id: str
    kind: str = "extract_turn"
    # pending → running → done | skipped | dropped | failed; "retrying" between attempts.
    # dropped: the model answered with items and none could be kept (dropped_reasons says
    # why); retried by POST /v1/ops/runs/retry like a failed run. With batching on
    # (TIERMEM_EXTRACTION__BATCH_TURNS > 1) a stored turn is "waiting" for its session's
    # batch before it is pending again and extracted.
    status: str
    attempts: int
    error: str | None
    message_id: str
    reply_message_id: str | None
    extractor: str  # "llm" or "offline" (the labelled rule-based fallback)
    extractor_version: str | None
    model: str | None  # the model called, on failure too
    # "json_schema", "json_object+schema" or "json_object"; the note says why not the configured
    # one ("fell back to json_object+schema: the server rejected json_schema (HTTP 500: ...)").
    response_format: str | None = None
    response_format_note: str | None = None
    prompt_hash: str | None
    facts_extracted: int
    facts_invalid: int  # items dropped: their meaning was missing or unreadable
    facts_repaired: int = 0  # items kept after the server filled in or fixed a field
    dropped_reasons: list[str] | None = None
    # Every item of the model's first reply was dropped and it was asked again with why
    # (TIERMEM_EXTRACTION__ASK_AGAIN_WHEN_DROPPED): the counts and reasons are both replies'.
    asked_again: bool = False
    # Known facts the reply touched whose value the model was asked for now, and the ones it
    # said changed or ended in the person's words (TIERMEM_EXTRACTION__ENDING_CHECKS_PER_TURN).
    ending_checks: int = 0
    values_changed: int = 0
    facts_added: int
    facts_merged: int
    facts_superseded: int
    skipped_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    llm_ms: float
    duration_ms: float
    # Extracted with other turns of its session in one LLM call: the runs claimed together
    # share batch_id; batch_size turns were in the call, and the tokens and llm_ms are this
    # run's share of it.
    batch_id: str | None = None
    batch_size: int | None = None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, run: ExtractionRun) -> JobPublic:
        return cls.model_validate(run.model_dump())


def get_job(*, session: Session, job_id: str, tenant_id: str | None) -> ExtractionRun:
    """tenant_id None (the operator) sees every tenant's jobs; another tenant's job is 404."""
    run = session.get(ExtractionRun, job_id)
    if run is None or (tenant_id is not None and run.tenant_id != tenant_id):
        raise NotFound(f"job {job_id} not found")
    return run


class UserRunPublic(JobPublic):
    """One of a user's extraction runs (a job), with the turn it read."""

    session_id: str = Field(description="the session of the turn, by your id")
    message: str = Field(description="what the user said in the turn the run extracted")


class UserRunList(BaseModel):
    """A page of a user's extraction runs, newest first, and how many match."""

    data: list[UserRunPublic]
    count: int


def runs_of_user(
    *, session: Session, user: User, statuses: Sequence[RunStatus], limit: int, offset: int
) -> UserRunList:
    """The user's live extraction runs (a replay's rehearsals left out), newest first;
    `statuses` empty: every status."""
    where: list[Any] = [
        ExtractionRun.user_id == user.id,
        col(ExtractionRun.replay_job_id).is_(None),
    ]
    if statuses:
        where.append(col(ExtractionRun.status).in_(statuses))
    total = session.exec(select(func.count()).select_from(ExtractionRun).where(*where)).one()
    rows = session.exec(
        select(ExtractionRun, ChatSession.external_id, Message.content)
        .join(ChatSession, col(ChatSession.id) == col(ExtractionRun.session_id))
        .join(Message, col(Message.id) == col(ExtractionRun.message_id))
        .where(*where)
        .order_by(col(ExtractionRun.created_at).desc(), col(ExtractionRun.id))
        .offset(offset)
        .limit(limit)
    ).all()
    data = [
        UserRunPublic.model_validate(
            {**run.model_dump(), "session_id": chat_external_id, "message": content}
        )
        for run, chat_external_id, content in rows
    ]
    return UserRunList(data=data, count=int(total))
