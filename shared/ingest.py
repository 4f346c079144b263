"""Storing chat messages as the source of truth; one pending extraction run per user turn."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from sqlalchemy import Table, insert, update
from sqlalchemy import select as sa_select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel, col, select

from shared.config import Settings
from shared.db.models import ChatSession, ExtractionRun, Message, User, utcnow
from shared.errors import Conflict, InvalidInput, NotFound
from shared.tokens import count_tokens

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}$")
ID_RULE = "1-128 characters: letters, digits and . _ : @ -, starting with a letter or digit"


def check_identifier(value: str) -> str:
    if not _ID_RE.match(value):
        raise ValueError(f"invalid id {value[:40]!r}: use {ID_RULE}")
    return value


Identifier = Annotated[str, AfterValidator(check_identifier)]
Role = Literal["user", "assistant", "system", "tool"]


def _aware(value: dt.datetime | None) -> dt.datetime:
    if value is None:
        return utcnow()
    # A timestamp without an offset is taken as UTC rather than refused: most chat logs are.
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    speaker: str | None = Field(default=None, max_length=100)
    external_id: Identifier | None = None
    created_at: dt.datetime | None = None


class TurnIn(BaseModel):
    """One exchange: the user's message and, usually, the assistant's reply."""

    model_config = ConfigDict(extra="forbid")

    user_id: Identifier
    user_message: MessageIn | str
    assistant_message: MessageIn | str | None = None
    created_at: dt.datetime | None = None


class TranscriptLine(BaseModel):
    """One message of an existing transcript (`tiermem import` and POST /v1/import)."""

    model_config = ConfigDict(extra="forbid")

    user_id: Identifier = Field(validation_alias="user_id")
    session_id: Identifier
    role: Role
    content: str
    speaker: str | None = Field(default=None, max_length=100)
    created_at: dt.datetime | None = None
    external_id: Identifier | None = None


@dataclass(frozen=True)
class NewMessage:
    role: Role
    content: str
    speaker: str | None = None
    external_id: str | None = None
    created_at: dt.datetime | None = None


@dataclass
class IngestResult:
    session_id: str
    user_id: str
    messages: list[Message]
    runs: list[ExtractionRun]  # new pending runs: enqueue these after the commit
    duplicates: int = 0  # messages whose external_id was already stored
    existing_runs: list[ExtractionRun] = field(default_factory=list)


def turn_messages(turn: TurnIn) -> list[NewMessage]:
    out: list[NewMessage] = []
    for role, msg in (("user", turn.user_message), ("assistant", turn.assistant_message)):
        if msg is None:
            continue
        m = MessageIn(content=msg) if isinstance(msg, str) else msg
        out.append(
            NewMessage(
                role=role,  # type: ignore[arg-type]
                content=m.content,
                speaker=m.speaker,
                external_id=m.external_id,
                created_at=m.created_at or turn.created_at,
            )
        )
    return out


def validate_content(
    content: str, *, settings: Settings, where: str, check_length: bool = True
) -> str:
    if not content.strip():
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
    if not messages:
        raise InvalidInput("no messages to store")
    for i, m in enumerate(messages):
        validate_content(
            m.content,
            settings=settings,
            where=f"messages[{i}] ({m.role})",
            check_length=check_length,
        )

    # SQLAlchemy Core, not the ORM unit of work: this runs on every turn and the ORM's
    # flush bookkeeping was most of its cost (bench/results/ingest.md).
    user_id = _get_or_create_user(session, tenant_id, user_external_id)
    chat_id = _get_or_create_session(session, tenant_id, user_id, session_external_id)

    # Messages a client re-sends with the same external_id are not stored twice.
    ext_ids = [m.external_id for m in messages if m.external_id]
    known: dict[str, Message] = {}
    if ext_ids:
        rows = session.exec(
            select(Message).where(
                Message.session_id == chat_id, col(Message.external_id).in_(ext_ids)
            )
        ).all()
        known = {r.external_id: r for r in rows if r.external_id}
    fresh = [m for m in messages if not (m.external_id and m.external_id in known)]

    result = IngestResult(
        session_id=chat_id,
        user_id=user_id,
        messages=[],
        runs=[],
        duplicates=len(messages) - len(fresh),
    )
    if result.duplicates:
        run_ids = {r.run_id for r in known.values() if r.run_id}
        if run_ids:
            result.existing_runs = list(
                session.exec(select(ExtractionRun).where(col(ExtractionRun.id).in_(run_ids)))
            )
    if not fresh:
        result.messages = [known[m.external_id] for m in messages if m.external_id]
        return result

    now = utcnow()
    first_seq = _reserve_seqs(session, chat_id, len(fresh), now)
    stored = [
        Message(
            tenant_id=tenant_id,
            user_id=user_id,
            session_id=chat_id,
            seq=first_seq + offset,
            role=m.role,
            speaker=m.speaker,
            content=m.content,
            token_count=count_tokens(m.content),
            external_id=m.external_id,
            created_at=_aware(m.created_at),
            received_at=now,
        )
        for offset, m in enumerate(fresh)
    ]
    # A user message and the assistant reply right after it form one turn: one run.
    for i, row in enumerate(stored):
        if row.role != "user":
            continue
        reply = stored[i + 1] if i + 1 < len(stored) and stored[i + 1].role == "assistant" else None
        run = ExtractionRun(
            tenant_id=tenant_id,
            user_id=user_id,
            session_id=chat_id,
            message_id=row.id,
            reply_message_id=reply.id if reply else None,
            extractor=extractor,
            enqueued_at=now,
        )
        row.extraction_status = "pending"
        row.run_id = run.id
        result.runs.append(run)
    try:
        _insert_rows(session, Message, stored)  # messages before runs: runs reference them
        _insert_rows(session, ExtractionRun, result.runs)
    except IntegrityError as exc:
        session.rollback()
        raise Conflict(
            "a message with one of these external_ids was stored at the same moment; "
            "retry the request (it is idempotent on external_id)"
        ) from exc
    result.messages = stored
    return result


def _table(model: type[SQLModel]) -> Table:
    return SQLModel.metadata.tables[str(model.__tablename__)]


def _insert_rows(session: Session, model: type[SQLModel], rows: Sequence[SQLModel]) -> None:
    if not rows:
        return
    values = [row.model_dump() for row in rows]
    # Columns no row sets are left to the database (NULL): an INSERT names only what it
    # stores, so it also runs against a schema from before a nullable column was added.
    named = [key for key in values[0] if any(v[key] is not None for v in values)]
    session.execute(insert(_table(model)), [{key: v[key] for key in named} for v in values])


def _reserve_seqs(session: Session, chat_id: str, n: int, now: dt.datetime) -> int:
    """Atomically take `n` positions in the session; concurrent writers get disjoint ranges."""
    stmt = (
        update(ChatSession)
        .where(col(ChatSession.id) == chat_id)
        .values(next_seq=col(ChatSession.next_seq) + n, updated_at=now)
        .returning(col(ChatSession.next_seq))
    )
    new_next = session.execute(stmt).scalar_one()
    return int(new_next) - n


def _insert_ignore(session: Session, model: type[SQLModel], values: dict[str, object]) -> None:
    """INSERT … ON CONFLICT DO NOTHING: two first turns of a new user may race."""
    table = _table(model)
    if session.get_bind().dialect.name == "postgresql":
        session.execute(postgresql.insert(table).values(**values).on_conflict_do_nothing())
    else:
        session.execute(sqlite.insert(table).values(**values).on_conflict_do_nothing())


def _get_or_create_user(session: Session, tenant_id: str, external_id: str) -> str:
    query = sa_select(_table(User).c.id).where(
        _table(User).c.tenant_id == tenant_id, _table(User).c.external_id == external_id
    )
    user_id = session.execute(query).scalar()
    if user_id is None:
        _insert_ignore(
            session, User, User(tenant_id=tenant_id, external_id=external_id).model_dump()
        )
        user_id = session.execute(query).scalar_one()
    return str(user_id)


def _get_or_create_session(session: Session, tenant_id: str, user_id: str, external_id: str) -> str:
    table = _table(ChatSession)
    query = sa_select(table.c.id, table.c.user_id).where(
        table.c.tenant_id == tenant_id, table.c.external_id == external_id
    )
    row = session.execute(query).first()
    if row is None:
        values = ChatSession(tenant_id=tenant_id, user_id=user_id, external_id=external_id)
        _insert_ignore(session, ChatSession, values.model_dump())
        row = session.execute(query).one()
    if row.user_id != user_id:
        raise Conflict(
            f"session {external_id!r} belongs to another user; use a new session id",
            details={"session_id": external_id},
        )
    return str(row.id)


def find_user(*, session: Session, tenant_id: str, user_external_id: str) -> User:
    user = session.exec(
        select(User).where(User.tenant_id == tenant_id, User.external_id == user_external_id)
    ).first()
    if user is None:
        raise NotFound(
            f"user {user_external_id!r} not found", details={"user_id": user_external_id}
        )
    return user


def attach_reply(*, session: Session, run_id: str, reply_message_id: str) -> bool:
    """Make a stored assistant message the reply of a run opened for the user message alone
    (POST /v1/chat stores the user's message before the chat model answers).

    Only a run no worker has started is changed, atomically; False otherwise (the outbox
    sweeper sent it during a very slow reply), and the reply stays stored without the link.
    """
    stmt = (
        update(ExtractionRun)
        .where(
            col(ExtractionRun.id) == run_id,
            col(ExtractionRun.status) == "pending",
            col(ExtractionRun.reply_message_id).is_(None),
        )
        .values(reply_message_id=reply_message_id, updated_at=utcnow())
    )
    return bool(session.execute(stmt).rowcount)  # type: ignore[attr-defined]
