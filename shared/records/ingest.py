"""Storing chat messages as the source of truth; one pending extraction run per user turn."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import PydanticUndefined
from sqlalchemy import Row, Select, Table, bindparam, insert, update
from sqlalchemy import select as sa_select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel

from shared.config import Settings
from shared.db.models import ChatSession, ExtractionRun, Message, User, new_id, utcnow
from shared.errors import Conflict, InvalidInput
from shared.inputs import BLANK, as_utc
from shared.records.models import MessageIn, Role, TranscriptLine
from shared.tokens import count_tokens


@dataclass(frozen=True)
class NewMessage:
    role: Role
    content: str
    speaker: str | None = None
    external_id: str | None = None
    created_at: dt.datetime | None = None

    @classmethod
    def of(
        cls, said: MessageIn | TranscriptLine, role: Role, *, at: dt.datetime | None = None
    ) -> NewMessage:
        """A message as a request gave it, said by `role` (at `at` when it names no time)."""
        return cls(
            role=role,
            content=said.content,
            speaker=said.speaker,
            external_id=said.external_id,
            created_at=said.created_at or at,
        )


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    id: str
    seq: int
    role: str
    external_id: str | None
    run_id: str | None  # the extraction run of a user message


@dataclass(frozen=True, kw_only=True)
class StoredRun:
    id: str
    status: str
    extractor: str
    reply_message_id: str | None


@dataclass
class IngestResult:
    chat_id: str  # the session's internal id
    user_id: str
    messages: list[StoredMessage]
    runs: list[StoredRun]  # new pending runs: enqueue these after the commit
    duplicates: int = 0  # messages whose external_id was already stored
    existing_runs: list[StoredRun] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class IngestRequest:
    """Messages to append to one session of one user, checked by whoever built it
    (`records.turns.turn_request`, `ingest_messages`, `import_lines`): `ingest_batch` stores
    them as they are."""

    tenant_id: str
    user_external_id: str
    session_external_id: str
    messages: Sequence[NewMessage]
    extractor: str


def validate_content(
    content: str, *, settings: Settings, where: str, check_length: bool = True
) -> str:
    if not content.strip(BLANK):
        raise InvalidInput(f"{where}: content is empty; send the message text")
    limit = settings.extraction.max_message_chars
    if check_length and len(content) > limit:
        raise InvalidInput(
            f"{where}: content is {len(content)} characters; the limit is {limit} "
            "(TIERMEM_EXTRACTION__MAX_MESSAGE_CHARS)",
            details={"length": len(content), "limit": limit},
        )
    if "\x00" in content:
        raise InvalidInput(f"{where}: content contains a NUL character; remove it")
    return content


def check_messages(
    messages: Sequence[NewMessage], *, settings: Settings, check_length: bool = True
) -> None:
    if not messages:
        raise InvalidInput("no messages to store")
    for i, m in enumerate(messages):
        validate_content(
            m.content,
            settings=settings,
            where=f"messages[{i}] ({m.role})",
            check_length=check_length,
        )


def ingest_messages(
    *,
    session: Session,
    settings: Settings,
    tenant_id: str,
    user_external_id: str,
    session_external_id: str,
    messages: Sequence[NewMessage],
    extractor: str,
    check_length: bool = True,
) -> IngestResult:
    """Append messages to a session (created on first use) and open one run per user message.

    Everything is validated before anything is written. The caller commits, then enqueues
    `result.runs` — the outbox sweeper covers a crash in between. `check_length=False` is
    for text tiermem produced itself (the chat model's reply), which is stored whole.
    """
    check_messages(messages, settings=settings, check_length=check_length)
    request = IngestRequest(
        tenant_id=tenant_id,
        user_external_id=user_external_id,
        session_external_id=session_external_id,
        messages=messages,
        extractor=extractor,
    )
    return ingest_batch(session=session, settings=settings, requests=[request])[0]


def ingest_batch(
    *, session: Session, settings: Settings, requests: Sequence[IngestRequest]
) -> list[IngestResult]:
    """`ingest_messages` for many requests in the caller's one transaction (the group
    commit of shared/flows/store_turn.py); the rows of all go in one INSERT per table. The
    requests were checked when they were built. Raises on the first request that cannot be
    stored (a session of another user): the caller rolls the whole batch back.

    Requests are stored ordered by user and session, so two batches lock rows in the same
    order (no deadlock between API processes on PostgreSQL); the sort is stable, so one
    session's messages keep their arrival order, and each request sees the messages of the
    ones before it, as if they had committed first.
    """
    # Before the first statement, so not while this process holds the write lock.
    token_counts = {m: count_tokens(m.content) for r in requests for m in r.messages}
    batch = _Batch(now=utcnow(), token_counts=token_counts)
    order = sorted(
        range(len(requests)),
        key=lambda i: (
            requests[i].tenant_id,
            requests[i].user_external_id,
            requests[i].session_external_id,
        ),
    )
    results = {i: _prepare(session, requests[i], batch) for i in order}
    try:
        if batch.message_rows:  # messages before runs: runs reference them
            session.execute(_INSERT_MESSAGE, batch.message_rows)
        if batch.run_rows:
            session.execute(_INSERT_RUN, batch.run_rows)
    except IntegrityError as exc:
        session.rollback()
        raise Conflict(
            "a message with one of these external_ids was stored at the same moment; "
            "retry the request (it is idempotent on external_id)"
        ) from exc
    return [results[i] for i in range(len(requests))]


# SQLAlchemy Core with statements built once, and rows as plain dicts: this runs on every
# turn, and the ORM's unit of work, building statements per call and constructing model
# objects were most of its cost (docs/benchmarks.md, turn ingest).
def _table(model: type[SQLModel]) -> Table:
    return SQLModel.metadata.tables[str(model.__tablename__)]


_users, _sessions = _table(User), _table(ChatSession)
_messages, _runs = _table(Message), _table(ExtractionRun)
_FIND_USER = sa_select(_users.c.id).where(
    _users.c.tenant_id == bindparam("tenant_id"), _users.c.external_id == bindparam("external_id")
)
_FIND_SESSION = sa_select(_sessions.c.id, _sessions.c.user_id).where(
    _sessions.c.tenant_id == bindparam("tenant_id"),
    _sessions.c.external_id == bindparam("external_id"),
)
_KNOWN_MESSAGES = sa_select(
    _messages.c.id, _messages.c.seq, _messages.c.role, _messages.c.external_id, _messages.c.run_id
).where(
    _messages.c.session_id == bindparam("chat_id"),
    _messages.c.external_id.in_(bindparam("external_ids", expanding=True)),
)
_RUNS_BY_ID = sa_select(
    _runs.c.id, _runs.c.status, _runs.c.extractor, _runs.c.reply_message_id
).where(_runs.c.id.in_(bindparam("run_ids", expanding=True)))
# Atomically take n positions in the session: concurrent writers get disjoint ranges.
_RESERVE_SEQS = (
    update(_sessions)
    .where(_sessions.c.id == bindparam("chat_id"))
    .values(next_seq=_sessions.c.next_seq + bindparam("n"), updated_at=bindparam("now"))
    .returning(_sessions.c.next_seq)
)
_INSERT_MESSAGE, _INSERT_RUN = insert(_messages), insert(_runs)


def _model_defaults(model: type[SQLModel]) -> dict[str, object]:
    """The model's constant, non-NULL field defaults, computed once: rows are plain dicts
    (constructing model objects cost more than the INSERT), so they start from these.
    Columns with a server default are left to the database."""
    columns = model.__table__.c  # type: ignore[attr-defined]
    return {
        name: info.default
        for name, info in model.model_fields.items()
        if info.default is not PydanticUndefined
        and info.default is not None
        and columns[name].server_default is None
    }


_MESSAGE_DEFAULTS, _RUN_DEFAULTS = _model_defaults(Message), _model_defaults(ExtractionRun)


@dataclass
class _Batch:
    """The rows a batch will insert, and what its later requests must see of them."""

    now: dt.datetime
    token_counts: dict[NewMessage, int]
    message_rows: list[dict[str, Any]] = field(default_factory=list)
    run_rows: list[dict[str, Any]] = field(default_factory=list)
    messages: dict[tuple[str, str], StoredMessage] = field(default_factory=dict)
    runs: dict[str, StoredRun] = field(default_factory=dict)


def _prepare(session: Session, request: IngestRequest, batch: _Batch) -> IngestResult:
    tenant_id = request.tenant_id
    user_id = get_or_create_user(session, tenant_id, request.user_external_id)
    chat_id = _get_or_create_session(session, tenant_id, user_id, request.session_external_id)
    known = _known_messages(session, batch, chat_id, request.messages)
    resent = _resent(request.messages, known)
    fresh = [m for m, again in zip(request.messages, resent, strict=True) if not again]
    result = IngestResult(
        chat_id=chat_id,
        user_id=user_id,
        messages=[],
        runs=[],
        duplicates=len(request.messages) - len(fresh),
    )
    if result.duplicates:
        run_ids = {m.run_id for m in known.values() if m.run_id}
        result.existing_runs = _runs_by_id(session, batch, run_ids)
    if not fresh:
        result.messages = [known[e] for m in request.messages if (e := m.external_id) in known]
        return result

    first_seq = session.execute(
        _RESERVE_SEQS, {"chat_id": chat_id, "n": len(fresh), "now": batch.now}
    ).scalar_one() - len(fresh)
    rows = _message_rows(request, user_id, chat_id, fresh, first_seq, batch)
    result.runs = _open_runs(request, rows, batch)
    batch.message_rows += rows
    for m, row in zip(fresh, rows, strict=True):
        message = StoredMessage(
            id=row["id"],
            seq=row["seq"],
            role=m.role,
            external_id=m.external_id,
            run_id=row["run_id"],
        )
        result.messages.append(message)
        if message.external_id:
            batch.messages[(chat_id, message.external_id)] = message
    return result


def _resent(messages: Sequence[NewMessage], known: dict[str, StoredMessage]) -> list[bool]:
    """Which messages of a request are stored already: each whose external_id is, and the
    reply right after a user message whose external_id is. A turn is identified by its user
    message's external_id, so a resent turn stores nothing of it, whatever its reply says
    (the reply stored first stands; a turn stored without one stays so)."""
    return [
        m.external_id in known
        or (m.role == "assistant" and i > 0 and messages[i - 1].role == "user"
            and messages[i - 1].external_id in known)
        for i, m in enumerate(messages)
    ]  # fmt: skip


def _message_rows(
    request: IngestRequest,
    user_id: str,
    chat_id: str,
    fresh: Sequence[NewMessage],
    first_seq: int,
    batch: _Batch,
) -> list[dict[str, Any]]:
    return [
        {
            **_MESSAGE_DEFAULTS,
            "id": new_id(),
            "tenant_id": request.tenant_id,
            "user_id": user_id,
            "session_id": chat_id,
            "seq": first_seq + offset,
            "role": m.role,
            "speaker": m.speaker,
            "content": m.content,
            "token_count": batch.token_counts[m],
            "external_id": m.external_id,
            "created_at": as_utc(m.created_at) if m.created_at else utcnow(),
            "received_at": batch.now,
            "run_id": None,
        }
        for offset, m in enumerate(fresh)
    ]


def _open_runs(
    request: IngestRequest, rows: list[dict[str, Any]], batch: _Batch
) -> list[StoredRun]:
    """One pending run per user message, with the assistant reply right after it."""
    runs = []
    for i, row in enumerate(rows):
        if row["role"] != "user":
            continue
        reply = rows[i + 1] if i + 1 < len(rows) and rows[i + 1]["role"] == "assistant" else None
        run = StoredRun(
            id=new_id(),
            status="pending",
            extractor=request.extractor,
            reply_message_id=reply["id"] if reply else None,
        )
        row["extraction_status"], row["run_id"] = "pending", run.id
        batch.run_rows.append(
            {
                **_RUN_DEFAULTS,
                "id": run.id,
                "tenant_id": row["tenant_id"],
                "user_id": row["user_id"],
                "session_id": row["session_id"],
                "message_id": row["id"],
                "reply_message_id": run.reply_message_id,
                "extractor": run.extractor,
                "created_at": batch.now,
                "enqueued_at": batch.now,
                "updated_at": batch.now,
            }
        )
        batch.runs[run.id] = run
        runs.append(run)
    return runs


def _known_messages(
    session: Session, batch: _Batch, chat_id: str, messages: Sequence[NewMessage]
) -> dict[str, StoredMessage]:
    known: dict[str, StoredMessage] = {}
    unseen: list[str] = []
    for m in messages:
        if m.external_id:
            earlier = batch.messages.get((chat_id, m.external_id))
            if earlier:
                known[m.external_id] = earlier
            else:
                unseen.append(m.external_id)
    if unseen:
        rows = session.execute(_KNOWN_MESSAGES, {"chat_id": chat_id, "external_ids": unseen})
        for row in rows:
            known[row.external_id] = StoredMessage(
                id=row.id,
                seq=row.seq,
                role=row.role,
                external_id=row.external_id,
                run_id=row.run_id,
            )
    return known


def _runs_by_id(session: Session, batch: _Batch, run_ids: set[str]) -> list[StoredRun]:
    runs = [batch.runs[i] for i in run_ids if i in batch.runs]
    stored = [i for i in run_ids if i not in batch.runs]
    if stored:
        rows = session.execute(_RUNS_BY_ID, {"run_ids": stored})
        runs += [
            StoredRun(
                id=r.id, status=r.status, extractor=r.extractor, reply_message_id=r.reply_message_id
            )
            for r in rows
        ]
    return runs


def _find_or_insert(
    session: Session, find: Select[Any], params: dict[str, str], new: Callable[[], SQLModel]
) -> Row[Any]:
    """The row `find` selects, inserted from `new()` first if there is none. The INSERT is
    ON CONFLICT DO NOTHING: two first turns of a new user or session may race."""
    row = session.execute(find, params).first()
    if row is None:
        created = new()
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        insert_ignore = dialect.insert(_table(type(created))).on_conflict_do_nothing()
        session.execute(insert_ignore.values(**created.model_dump()))
        row = session.execute(find, params).one()
    return row


def get_or_create_user(session: Session, tenant_id: str, external_id: str) -> str:
    """The id of the tenant's user `external_id`, inserted (not committed) when new."""
    row = _find_or_insert(
        session,
        _FIND_USER,
        {"tenant_id": tenant_id, "external_id": external_id},
        lambda: User(tenant_id=tenant_id, external_id=external_id),
    )
    return str(row.id)


def _get_or_create_session(session: Session, tenant_id: str, user_id: str, external_id: str) -> str:
    row = _find_or_insert(
        session,
        _FIND_SESSION,
        {"tenant_id": tenant_id, "external_id": external_id},
        lambda: ChatSession(tenant_id=tenant_id, user_id=user_id, external_id=external_id),
    )
    if row.user_id != user_id:
        raise Conflict(
            f"session {external_id!r} belongs to another user; use a new session id",
            details={"session_id": external_id},
        )
    return str(row.id)
