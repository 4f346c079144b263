"""Replay: re-run extraction over stored turns after the model or the prompt changed.

A job selects turns (their live extraction runs) and opens one new extraction run per
turn, tagged with the job. Workers on the `replay` queue run them through the normal
pipeline; what happens to the result depends on the mode:

- `apply`: written through the normal dedup/merge/supersede path, like a live turn.
- `dry_run`: kept on the run (`staged`); once every turn of a user is extracted, the
  user's diff against the live facts — added, merged, superseded, missing — is computed by
  applying the staged facts in a transaction that is rolled back.
- `rebuild`: staged the same way; then, under the user's lock and in one transaction,
  the facts that came only from the selected messages and that the new extraction does
  not produce again are retired and the staged facts written. Vectors go in before the
  retired ones go out, so a search never misses a fact that stays.

Idempotent throughout: fact ids derive from (user, message, content), runs finish once,
and a user's finishing step does nothing when no staged run is left.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, insert, or_, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from shared.db.models import (
    ChatSession,
    ExtractionRun,
    Fact,
    Message,
    ReplayJob,
    User,
    new_id,
    utcnow,
)
from shared.errors import InvalidInput, NotFound
from shared.extraction.schemas import typed_fact_adapter
from shared.memory.writer import (
    Provenance,
    WriteOutcome,
    apply_facts,
    fact_id,
    mirror_to_vectors,
)
from shared.records import replay
from shared.records.replay import (
    ReplayIn,
)
from shared.records.runs import OPEN, RETRYABLE
from shared.runtime import Runtime
from shared.vectors.scope import UserVectors

# A staged turn ready to apply: its run, facts, their vectors, and its provenance.
Turn = tuple[ExtractionRun, list[Any], Any, "Provenance"]


INSERT_PAGE = 2000


def create_job(*, session: Session, runtime: Runtime, body: ReplayIn) -> ReplayJob:
    """Select the turns and open their runs (committed); the caller starts the dispatcher."""
    if (body.user_ids or body.session_ids) and not body.tenant_id:
        raise InvalidInput("user_ids and session_ids are per tenant: give tenant_id too")
    extractor = runtime.extractor
    query = sa_select(
        col(ExtractionRun.tenant_id),
        col(ExtractionRun.user_id),
        col(ExtractionRun.session_id),
        col(ExtractionRun.message_id),
        col(ExtractionRun.reply_message_id),
    ).where(
        col(ExtractionRun.replay_job_id).is_(None),
        col(ExtractionRun.status).not_in(OPEN),  # a turn still being extracted live waits
    )
    if body.tenant_id:
        query = query.where(col(ExtractionRun.tenant_id) == body.tenant_id)
    if body.user_ids:
        users = _ids(session, User, body.tenant_id, body.user_ids, "user")
        query = query.where(col(ExtractionRun.user_id).in_(users))
    if body.session_ids:
        chats = _ids(session, ChatSession, body.tenant_id, body.session_ids, "session")
        query = query.where(col(ExtractionRun.session_id).in_(chats))
    if body.since or body.until:
        query = query.join(Message, col(Message.id) == col(ExtractionRun.message_id))
        if body.since:
            query = query.where(col(Message.created_at) >= body.since)
        if body.until:
            query = query.where(col(Message.created_at) < body.until)
    if body.stale_only:
        # Turns extracted by another version, and those whose run kept nothing it was given.
        query = query.where(
            or_(
                func.coalesce(ExtractionRun.extractor_version, "") != extractor.version,
                col(ExtractionRun.status).in_(RETRYABLE),
            )
        )
    job = ReplayJob(
        tenant_id=body.tenant_id,
        mode=body.mode,
        selection=body.model_dump(mode="json", exclude={"mode"}, exclude_none=True),
        extractor=extractor.kind,
        extractor_version=extractor.version,
        started_at=utcnow(),
    )
    session.add(job)
    session.flush()
    total = 0
    rows = session.execute(query.order_by(col(ExtractionRun.created_at))).all()
    table = ExtractionRun.__table__  # type: ignore[attr-defined]
    now = utcnow()
    for start in range(0, len(rows), INSERT_PAGE):
        page = rows[start : start + INSERT_PAGE]
        session.execute(
            insert(table),
            [
                {
                    "id": new_id(), "tenant_id": r[0], "user_id": r[1], "session_id": r[2],
                    "message_id": r[3], "reply_message_id": r[4], "status": "pending",
                    "attempts": 0, "extractor": extractor.kind, "prompt_tokens": 0,
                    "completion_tokens": 0, "llm_ms": 0.0, "duration_ms": 0.0,
                    "facts_extracted": 0, "facts_invalid": 0, "facts_added": 0,
                    "facts_merged": 0, "facts_superseded": 0, "created_at": now,
                    "updated_at": now, "replay_job_id": job.id, "replay_mode": body.mode,
                }
                for r in page
            ],
        )  # fmt: skip
        total += len(page)
    if total == 0:
        session.rollback()
        raise InvalidInput("no stored turns match this selection", details=job.selection)
    job.total = total
    session.add(job)
    session.commit()
    return job


def _ids(
    session: Session, model: Any, tenant_id: str | None, external: Sequence[str], what: str
) -> list[str]:
    rows = session.exec(
        select(model.id, model.external_id).where(
            model.tenant_id == tenant_id, col(model.external_id).in_(list(external))
        )
    ).all()
    missing = sorted(set(external) - {r[1] for r in rows})
    if missing:
        raise NotFound(f"unknown {what} ids in this tenant: {', '.join(missing[:10])}")
    return [r[0] for r in rows]


# -- the worker's side: what to send, which turn to run, then finishing ----------------------


def next_runs(runtime: Runtime, job_id: str, *, queued: int) -> tuple[list[str], int]:
    """The job's runs to send now, topping the replay queue (holding `queued`) up to
    max_queued, and how many remain unsent; nothing once the job is not running."""
    with Session(runtime.engine) as session:
        if replay.job_status(session, job_id) != "running":
            return [], 0  # cancelled (resume starts a new dispatcher) or done
        room = runtime.settings.replay.max_queued - queued
        return replay.next_batch(session=session, job_id=job_id, limit=max(0, room))


def replayable(runtime: Runtime, run_id: str) -> tuple[str, str] | str:
    """The (job id, user id) of a replay run to extract now, or why not: "gone", or
    "cancelled" (the run stays pending for a resume)."""
    with Session(runtime.engine) as session:
        run = session.get(ExtractionRun, run_id)
        if run is None or run.replay_job_id is None:
            return "gone"
        if replay.job_status(session, run.replay_job_id) != "running":
            return "cancelled"
        return run.replay_job_id, run.user_id


def finish_turn(*, runtime: Runtime, job_id: str, user_id: str) -> None:
    """After a replay run: the user's diff or rebuild once all their turns are in, then the
    job's end once every user's are."""
    finish_user(runtime=runtime, job_id=job_id, user_id=user_id)
    with Session(runtime.engine) as session:
        replay.finish_job_if_done(session=session, job_id=job_id)


def finish_user(*, runtime: Runtime, job_id: str, user_id: str) -> bool:
    """Once none of the user's turns in the job is open: diff (dry run) or swap (rebuild)
    the staged facts. Returns True when it did (False: turns still open, or done before)."""
    user_runs = (
        col(ExtractionRun.replay_job_id) == job_id,
        col(ExtractionRun.user_id) == user_id,
    )
    with Session(runtime.engine, expire_on_commit=False) as session:
        job = session.get(ReplayJob, job_id)
        if job is None or job.mode == "apply":
            return False
        runs = list(
            session.exec(
                select(ExtractionRun).where(*user_runs).order_by(col(ExtractionRun.created_at))
            ).all()
        )
        session.expunge_all()
    if any(r.status in OPEN for r in runs):
        return False
    staged = [r for r in runs if r.status == "staged"]
    if not staged:
        return False
    selected = {m for r in runs for m in (r.message_id, r.reply_message_id) if m}
    turns = _staged_turns(runtime, staged)  # the embedding work, before the lock
    with (
        runtime.user_locks.hold(user_id),
        Session(runtime.engine, expire_on_commit=False) as session,
    ):
        # Under the lock: a second finisher of the same user finds nothing left staged.
        still = set(
            session.exec(
                select(ExtractionRun.id).where(
                    col(ExtractionRun.id).in_([r.id for r in staged]),
                    col(ExtractionRun.status) == "staged",
                )
            ).all()
        )
        if not still:
            return False
        turns = [t for t in turns if t[0].id in still]
        if job.mode == "dry_run":
            report = _dry_run(runtime, session, user_id, turns, selected)
            outcomes: list[WriteOutcome] = []
            retired: list[str] = []
        else:
            outcomes, retired = _rebuild(runtime, session, user_id, turns, selected)
            report = {
                "retired": retired,
                "added": sum(len(o.added) for o in outcomes),
                "merged": sum(len(o.merged) for o in outcomes),
                "superseded": sum(len(o.superseded) for o in outcomes),
            }
        report["turns"] = len(still)
        _mark_done(session, list(still))
        _add_report(session, job_id, user_id, report)
        session.commit()
        if job.mode == "rebuild":
            mirror_to_vectors(
                session=session, facts_vectors=_facts_of(runtime, staged[0]), user_id=user_id,
                outcomes=outcomes, retired=retired,
            )  # fmt: skip
    return True


def _facts_of(runtime: Runtime, run: ExtractionRun) -> UserVectors:
    return runtime.facts_of(tenant_id=run.tenant_id, user_id=run.user_id)


def _staged_turns(runtime: Runtime, staged: Sequence[ExtractionRun]) -> list[Turn]:
    """Each staged run's facts, their vectors and provenance; embedded before any lock."""
    out = []
    for run in staged:
        payload = run.staged or {}
        facts = [typed_fact_adapter.validate_python(f) for f in payload.get("facts", [])]
        if not facts:
            continue
        vectors = runtime.embedder.embed([f.content for f in facts])
        provenance = Provenance(
            tenant_id=run.tenant_id,
            user_id=run.user_id,
            chat_id=run.session_id,
            message_ids=tuple(m for m in (run.message_id, run.reply_message_id) if m),
            seen_at=dt.datetime.fromisoformat(payload["seen_at"]),
            extractor=payload.get("extractor", run.extractor),
            extractor_version=payload.get("extractor_version") or "",
            model=payload.get("model"),
        )
        out.append((run, facts, vectors, provenance))
    return out


def _only_from(session: Session, user_id: str, selected: set[str]) -> list[Fact]:
    """The user's active facts every source message of which is among the selected ones."""
    active = session.exec(
        select(Fact).where(Fact.user_id == user_id, col(Fact.valid_to).is_(None))
    ).all()
    return [f for f in active if f.source_message_ids and set(f.source_message_ids) <= selected]


def _apply_all(runtime: Runtime, session: Session, turns: Sequence[Turn]) -> list[WriteOutcome]:
    threshold = runtime.settings.extraction.dedup_threshold
    return [
        apply_facts(
            session=session,
            facts_vectors=_facts_of(runtime, run),
            facts=facts,
            embeddings=vectors,
            provenance=provenance,
            dedup_threshold=threshold,
        )  # fmt: skip
        for run, facts, vectors, provenance in turns
    ]


def _describe(session: Session, ids: Sequence[str]) -> list[dict[str, Any]]:
    rows = {f.id: f for f in session.exec(select(Fact).where(col(Fact.id).in_(list(ids)))).all()}
    return [
        {"id": i, "type": rows[i].type, "content": rows[i].content}
        for i in dict.fromkeys(ids)
        if i in rows
    ]


def _dry_run(
    runtime: Runtime, session: Session, user_id: str, turns: Sequence[Turn], selected: set[str]
) -> dict[str, Any]:
    before = _only_from(session, user_id, selected)
    session.rollback()  # end the read: the rehearsal below opens its own transaction
    outcomes = _apply_all(runtime, session, turns)
    kept = {i for o in outcomes for i in (*o.merged, *o.unchanged)}
    report = {
        "added": _describe(session, [i for o in outcomes for i in o.added]),
        "merged": _describe(session, [i for o in outcomes for i in o.merged]),
        "superseded": _describe(session, [i for o in outcomes for i in o.superseded]),
        "missing": [
            {"id": f.id, "type": f.type, "content": f.content} for f in before if f.id not in kept
        ],
    }
    session.rollback()  # a rehearsal: nothing of it stays
    return report


def _rebuild(
    runtime: Runtime, session: Session, user_id: str, turns: Sequence[Turn], selected: set[str]
) -> tuple[list[WriteOutcome], list[str]]:
    """Retire what only the selection said and is not said again, write the new facts:
    one transaction (the caller commits), so no reader sees the user between the two."""
    again = {
        fact_id(user_id=user_id, message_id=run.message_id, fact=f)
        for run, facts, _, _ in turns
        for f in facts
    }
    retired = [f for f in _only_from(session, user_id, selected) if f.id not in again]
    now = utcnow()
    for fact in retired:
        fact.valid_to = now
        fact.updated_at = now
        session.add(fact)
    session.flush()
    return _apply_all(runtime, session, turns), [f.id for f in retired]


def _mark_done(session: Session, run_ids: Sequence[str]) -> None:
    now = utcnow()
    session.execute(
        update(ExtractionRun)
        .where(col(ExtractionRun.id).in_(list(run_ids)), col(ExtractionRun.status) == "staged")
        .values(status="done", updated_at=now)
    )


def _add_report(session: Session, job_id: str, user_id: str, report: dict[str, Any]) -> None:
    # Row lock (PostgreSQL; SQLite's write transaction already is one): two users of the
    # same job finishing at once must not lose each other's entry.
    job = session.exec(select(ReplayJob).where(ReplayJob.id == job_id).with_for_update()).one()
    user = session.get(User, user_id)
    public = {k: v for k, v in report.items() if not k.startswith("_")}
    job.report = {**job.report, (user.external_id if user else user_id): public}
    job.updated_at = utcnow()
    session.add(job)
