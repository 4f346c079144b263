"""SQL tables: the system of record for tenants, keys, users, sessions, messages, facts and runs."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import JSON, Boolean, Column, Index, Integer, Text, UniqueConstraint, false, text
from sqlmodel import Field, SQLModel


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_id() -> str:
    return str(uuid.uuid4())


class Tenant(SQLModel, table=True):
    __tablename__ = "tenants"

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    name: str = Field(max_length=100, unique=True)
    created_at: dt.datetime = Field(default_factory=utcnow)


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    # sha256 of the key: a leaked database does not leak working keys
    key_hash: str = Field(max_length=64, unique=True)
    prefix: str = Field(max_length=12)  # first characters, to tell keys apart in listings
    tenant_id: str | None = Field(default=None, foreign_key="tenants.id", index=True)
    scope: str = Field(max_length=16)  # "app" (one tenant's users) or "admin" (ops, tenants)
    name: str = Field(default="", max_length=100)
    created_at: dt.datetime = Field(default_factory=utcnow)
    revoked_at: dt.datetime | None = None


class User(SQLModel, table=True):
    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("tenant_id", "external_id", name="uq_users_tenant_ext"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    tenant_id: str = Field(foreign_key="tenants.id", index=True)
    external_id: str = Field(max_length=128)  # the client's user id
    created_at: dt.datetime = Field(default_factory=utcnow)


class ChatSession(SQLModel, table=True):
    __tablename__ = "chat_sessions"
    __table_args__ = (UniqueConstraint("tenant_id", "external_id", name="uq_sessions_tenant_ext"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    tenant_id: str = Field(foreign_key="tenants.id", index=True)
    user_id: str = Field(foreign_key="users.id", index=True)
    external_id: str = Field(max_length=128)  # the client's session id
    parent_session_id: str | None = Field(default=None, max_length=36)
    # The next message's position; bumped atomically by UPDATE ... RETURNING.
    next_seq: int = 0
    created_at: dt.datetime = Field(default_factory=utcnow)
    updated_at: dt.datetime = Field(default_factory=utcnow)


class Message(SQLModel, table=True):
    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("session_id", "seq", name="uq_messages_session_seq"),
        UniqueConstraint("session_id", "external_id", name="uq_messages_session_ext"),
        Index("ix_messages_status_created", "extraction_status", "received_at"),
        # History search asks whether a user has messages the vector engine does not hold
        # yet; the index holds only those, so it stays as small as the worker's backlog.
        Index(
            "ix_messages_unindexed",
            "user_id",
            sqlite_where=text("indexed_at IS NULL"),
            postgresql_where=text("indexed_at IS NULL"),
        ),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    tenant_id: str = Field(foreign_key="tenants.id", index=True)
    user_id: str = Field(foreign_key="users.id", index=True)
    session_id: str = Field(foreign_key="chat_sessions.id", index=True)
    seq: int  # order within the session
    role: str = Field(max_length=16)
    speaker: str | None = Field(default=None, max_length=100)
    content: str = Field(sa_column=Column(Text, nullable=False))
    token_count: int = 0
    external_id: str | None = Field(default=None, max_length=128)
    created_at: dt.datetime  # when it was said (client's clock, or arrival)
    received_at: dt.datetime = Field(default_factory=utcnow)
    # pending → queued for extraction; waiting (for its session's batch, ADR 0024);
    # done / failed / skipped; "none" for replies
    extraction_status: str = Field(default="none", max_length=16)
    run_id: str | None = Field(default=None, max_length=36)
    # When the worker wrote the message into the user's message collection with its sparse
    # vector (ADR 0013): from then on history search finds it in the engine; before, SQL
    # full-text does.
    indexed_at: dt.datetime | None = None


class Fact(SQLModel, table=True):
    __tablename__ = "facts"
    __table_args__ = (
        Index("ix_facts_user_active", "user_id", "valid_to"),
        Index("ix_facts_user_norm", "user_id", "content_hash"),
        # Backstop under the per-user lock: never two active facts with the same content.
        Index(
            "uq_facts_user_active_content",
            "user_id",
            "content_hash",
            unique=True,
            sqlite_where=text("valid_to IS NULL"),
            postgresql_where=text("valid_to IS NULL"),
        ),
        Index("ix_facts_user_slot", "user_id", "slot"),
    )

    # Deterministic (see shared.memory.writer.fact_id): also the Qdrant point id.
    id: str = Field(primary_key=True, max_length=36)
    tenant_id: str = Field(foreign_key="tenants.id", index=True)
    user_id: str = Field(foreign_key="users.id")
    type: str = Field(max_length=16)
    content: str = Field(sa_column=Column(Text, nullable=False))
    content_hash: str = Field(max_length=64)  # sha256 of the normalized content
    subject: str = Field(max_length=100)
    slot: str | None = Field(default=None, max_length=300)
    slot_value: str | None = Field(default=None, max_length=300)
    details: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    confidence: float = 0.0
    mention_count: int = 1
    valid_from: dt.datetime | None = None
    valid_to: dt.datetime | None = None  # set → superseded; only NULL rows are in Qdrant
    superseded_by: str | None = Field(default=None, max_length=36)
    # Set by the injection guard: the fact is kept and listed, but never put in a prompt.
    quarantine_reason: str | None = Field(default=None, max_length=200)
    source_session_ids: list[str] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    source_message_ids: list[str] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    extractor: str = Field(max_length=16)  # "llm" or "offline"
    extractor_version: str = Field(max_length=32)
    model: str | None = Field(default=None, max_length=100)
    first_seen_at: dt.datetime = Field(default_factory=utcnow)
    last_seen_at: dt.datetime = Field(default_factory=utcnow)
    created_at: dt.datetime = Field(default_factory=utcnow)
    updated_at: dt.datetime = Field(default_factory=utcnow)


class ExtractionRun(SQLModel, table=True):
    """One extraction of one turn: what the API calls a job."""

    __tablename__ = "extraction_runs"
    __table_args__ = (
        Index("ix_runs_status_updated", "status", "updated_at"),
        Index("ix_runs_replay_job_status", "replay_job_id", "status"),
        # The ops view's "models in json_object fallback": a few rows among millions.
        Index(
            "ix_runs_format_fallback",
            "model",
            "updated_at",
            sqlite_where=text("response_format_note IS NOT NULL"),
            postgresql_where=text("response_format_note IS NOT NULL"),
        ),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    tenant_id: str = Field(foreign_key="tenants.id", index=True)
    user_id: str = Field(foreign_key="users.id", index=True)
    session_id: str = Field(foreign_key="chat_sessions.id")
    message_id: str = Field(foreign_key="messages.id", index=True)  # the user's message
    reply_message_id: str | None = Field(default=None, max_length=36)
    # pending running retrying done skipped dropped (items returned, none kept) failed staged;
    # waiting: stored, its extraction waits to be batched with the session's next turns
    status: str = Field(default="pending", max_length=16)
    attempts: int = 0
    error: str | None = Field(default=None, sa_column=Column(Text))
    extractor: str = Field(max_length=16)
    extractor_version: str | None = Field(default=None, max_length=32)
    model: str | None = Field(default=None, max_length=100)  # set on failure too (ADR 0018)
    prompt_hash: str | None = Field(default=None, max_length=32)
    # The LLM call's response_format (json_schema | json_object+schema | json_object), and
    # why not the configured one: the server rejected it, in this run or an earlier one.
    response_format: str | None = Field(default=None, max_length=32)
    response_format_note: str | None = Field(default=None, max_length=500)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_ms: float = 0.0
    duration_ms: float = 0.0
    facts_extracted: int = 0
    facts_invalid: int = 0  # items dropped: their meaning was missing or unreadable
    # Items kept after a field was filled in or fixed. The database fills it on insert (a
    # server default, as migration 0010 added it), so the write path never names it.
    facts_repaired: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default="0")
    )
    # Why items were dropped (the first few): a `dropped` run (every item) shows them.
    dropped_reasons: list[str] | None = Field(default=None, sa_column=Column(JSON))
    # Every item of the model's first reply was dropped, and it was asked again with why
    # (ADR 0031): the counts, tokens and reasons are both replies'. Migration 0013.
    asked_again: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false())
    )
    # Known facts the reply touched whose value the model was asked for now, and of them the
    # ones it said changed or ended in the person's words (ADR 0032). Migration 0014.
    ending_checks: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default="0")
    )
    values_changed: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default="0")
    )
    facts_added: int = 0
    facts_merged: int = 0
    facts_superseded: int = 0
    skipped_reason: str | None = Field(default=None, max_length=64)
    created_at: dt.datetime = Field(default_factory=utcnow)
    enqueued_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    updated_at: dt.datetime = Field(default_factory=utcnow)
    # Set on the runs of a replay (None for live extraction): its job and mode. A dry run
    # or rebuild keeps the extracted facts in `staged` (status "staged") until the job
    # diffs or swaps them in.
    replay_job_id: str | None = Field(default=None, max_length=36)
    replay_mode: str | None = Field(default=None, max_length=16)
    staged: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # The Celery worker (node name) that claimed the run last: ops compares it with the
    # live heartbeats to tell a running run from one whose worker died (orphaned).
    worker: str | None = Field(default=None, max_length=255)
    # Set when the run was extracted together with other turns of its session (ADR 0024):
    # the runs claimed together share batch_id; batch_size is how many turns its LLM call
    # read (its prompt and completion tokens and llm_ms are this run's share of that call's).
    batch_id: str | None = Field(default=None, max_length=36)
    batch_size: int | None = None


class ReplayJob(SQLModel, table=True):
    """Re-extraction over stored turns: POST /v1/replay, GET /v1/replay/{id}."""

    __tablename__ = "replay_jobs"

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    tenant_id: str | None = Field(default=None, max_length=36)  # None: every tenant
    mode: str = Field(max_length=16)  # dry_run | apply | rebuild
    selection: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    status: str = Field(default="running", max_length=16)  # running | cancelled | done
    total: int = 0
    extractor: str = Field(max_length=16)
    extractor_version: str = Field(max_length=32)
    # Per user (internal id): the dry run's diff, or what a rebuild retired and wrote.
    report: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    error: str | None = Field(default=None, sa_column=Column(Text))
    created_at: dt.datetime = Field(default_factory=utcnow)
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    updated_at: dt.datetime = Field(default_factory=utcnow)


class CompressionState(SQLModel, table=True):
    """A session's tier state: the version every compression step bumps, and its settings.

    The current tier is implicit: the session's messages after `covered_through_seq` (and
    after the pinned head). Rows go with their session (ON DELETE CASCADE).
    """

    __tablename__ = "compression_states"

    session_id: str = Field(
        foreign_key="chat_sessions.id", primary_key=True, max_length=36, ondelete="CASCADE"
    )
    tenant_id: str = Field(max_length=36)
    # Optimistic concurrency: a step commits only if the version is the one it read.
    version: int = 0
    # Per-session overrides of CompressionSettings (validated when set).
    settings: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    head_decided: bool = False  # the pin-head decision is made once, on the first run
    head_through_seq: int | None = None  # messages up to here are the pinned head
    covered_through_seq: int = -1  # the newest own message a tier entry covers
    # A continued session: the parent's message ranges its seed entries cover.
    seeded_spans: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    last_run_id: str | None = Field(default=None, max_length=36)
    created_at: dt.datetime = Field(default_factory=utcnow)
    updated_at: dt.datetime = Field(default_factory=utcnow)


class TierEntry(SQLModel, table=True):
    """One entry of the topics or bulks tier: a summary, or a message moved down verbatim."""

    __tablename__ = "tier_entries"
    __table_args__ = (
        UniqueConstraint("session_id", "tier", "position", name="uq_tier_entries_position"),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    session_id: str = Field(
        foreign_key="chat_sessions.id", index=True, max_length=36, ondelete="CASCADE"
    )
    tier: str = Field(max_length=8)  # topics | bulks
    position: int  # order within the tier, oldest first (gaps allowed)
    kind: str = Field(max_length=8)  # summary | message
    level: int = 0  # 0 verbatim, 1 topic summary, 2+ bulk (re-compressions add one)
    role: str = Field(default="system", max_length=16)
    speaker: str | None = Field(default=None, max_length=100)
    text: str = Field(sa_column=Column(Text, nullable=False))
    token_count: int = 0  # of `text`
    cost_tokens: int = 0  # of the line the context renders for it
    # The span: this session's messages first_seq..last_seq (None for an entry that only
    # covers a parent's messages), and every range it covers, parents' included, in `spans`.
    first_seq: int | None = None
    last_seq: int | None = None
    first_message_id: str | None = Field(default=None, max_length=36)
    last_message_id: str | None = Field(default=None, max_length=36)
    spans: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    message_count: int = 0
    span_end_at: dt.datetime | None = None  # when the newest covered message was said
    summarizer: str | None = Field(default=None, max_length=16)  # llm | offline
    model: str | None = Field(default=None, max_length=100)
    created_by_run: str | None = Field(default=None, max_length=36)
    created_at: dt.datetime = Field(default_factory=utcnow)


class CompressionRun(SQLModel, table=True):
    """One run of the loop over one session: what GET /v1/sessions/{id}/compression/runs lists."""

    __tablename__ = "compression_runs"
    __table_args__ = (Index("ix_compression_runs_session_created", "session_id", "created_at"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    session_id: str = Field(foreign_key="chat_sessions.id", max_length=36, ondelete="CASCADE")
    tenant_id: str = Field(max_length=36)
    trigger: str = Field(max_length=16)  # auto (after a reply) | compact | resume (a partial's)
    focus: str | None = Field(default=None, sa_column=Column(Text))
    # pending running done cannot_fit partial stale failed
    status: str = Field(default="pending", max_length=16)
    error: str | None = Field(default=None, sa_column=Column(Text))
    attempts: int = 0
    iterations: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    target_tokens: int = 0
    llm_calls: int = 0
    fallbacks: int = 0
    prompt_tokens: int = 0  # summarizer tokens, as the LLM server counted them
    completion_tokens: int = 0
    summarizer: str | None = Field(default=None, max_length=16)
    version_before: int | None = None
    version_after: int | None = None
    steps: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    llm_ms: float = 0.0
    engine_ms: float = 0.0  # the loop's own work: planning, counting, persisting
    duration_ms: float = 0.0
    created_at: dt.datetime = Field(default_factory=utcnow)
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    updated_at: dt.datetime = Field(default_factory=utcnow)


class Event(SQLModel, table=True):
    """What changed, for the backend: the outbox behind webhooks and GET /v1/events (ADR 0027).

    Written in the transaction of the change it announces; `seq` is the feed's cursor and the
    order of a tenant's events (shared.records.events keeps it the commit order)."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_tenant_seq", "tenant_id", "seq"),
        Index("ix_events_user", "user_id"),
        # A seq is never reused after a delete (a deleted user's events go with them).
        {"sqlite_autoincrement": True},
    )

    seq: int | None = Field(default=None, primary_key=True)
    id: str = Field(max_length=40, unique=True)  # "evt_…": the webhook-id of its deliveries
    tenant_id: str = Field(max_length=36)
    user_id: str | None = Field(default=None, max_length=36)  # tiermem's, to forget with the user
    type: str = Field(max_length=32)
    # The exact JSON body every delivery sends (so a resend signs the same bytes).
    body: str = Field(sa_column=Column(Text, nullable=False))
    created_at: dt.datetime = Field(default_factory=utcnow)


class Webhook(SQLModel, table=True):
    """A tenant's subscription: where its events of these types are delivered, signed."""

    __tablename__ = "webhooks"

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    tenant_id: str = Field(foreign_key="tenants.id", index=True)
    url: str = Field(max_length=2000)
    events: list[str] = Field(sa_column=Column(JSON, nullable=False))
    secret: str = Field(max_length=100)  # whsec_<base64>: HMAC needs it in the clear
    description: str = Field(default="", max_length=200)
    # Off by its owner (PATCH enabled=false) or by persistent failure (disabled_reason set).
    enabled: bool = True
    disabled_reason: str | None = Field(default=None, max_length=500)
    disabled_at: dt.datetime | None = None
    # The last event seq turned into deliveries for it (created at the newest seq then).
    cursor: int = 0
    consecutive_failures: int = 0
    failing_since: dt.datetime | None = None
    last_error: str | None = Field(default=None, max_length=1000)
    last_error_at: dt.datetime | None = None
    last_success_at: dt.datetime | None = None
    delivered_total: int = 0
    failed_attempts_total: int = 0
    created_at: dt.datetime = Field(default_factory=utcnow)
    updated_at: dt.datetime = Field(default_factory=utcnow)


class WebhookDelivery(SQLModel, table=True):
    """One event owed to one subscription: pending until a 2xx, retried with backoff."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "event_seq", name="uq_deliveries_webhook_event"),
        Index("ix_deliveries_status_due", "status", "next_attempt_at"),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    webhook_id: str = Field(foreign_key="webhooks.id", index=True)
    event_seq: int = Field(foreign_key="events.seq", index=True)
    status: str = Field(default="pending", max_length=16)  # pending | delivered
    attempts: int = 0
    next_attempt_at: dt.datetime = Field(default_factory=utcnow)
    # Sent to a worker until then; a worker killed mid-delivery leaves it to be claimed again.
    claimed_until: dt.datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, max_length=1000)
    created_at: dt.datetime = Field(default_factory=utcnow)
    delivered_at: dt.datetime | None = None
