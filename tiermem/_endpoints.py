"""Every /v1 route a chat backend or an admin uses, declared once for Client and AsyncClient.

Each method builds the request (`Call`, `Poll` or `Pages`); the client's transport sends it.
Request bodies are built by the server's own request models and answers read by its
response models (tiermem.models)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

from tiermem._calls import (
    Call,
    Pages,
    Poll,
    body,
    query_params,
    reads,
    reads_list,
    reads_nothing,
    segment,
)
from tiermem._transport import endpoint, paged, streamed
from tiermem.models import (
    BeliefTimeline,
    ChatIn,
    ChatPublic,
    CompactIn,
    CompressionRunList,
    CompressionRunPublic,
    CompressionSettingsIn,
    CompressionSettingsPublic,
    ContextPublic,
    ContinueIn,
    ContinuePublic,
    EventPage,
    FactType,
    ImportAccepted,
    ImportIn,
    JobPublic,
    KeyCreated,
    KeyIn,
    MemoriesPublic,
    MemoryPublic,
    MessageHitsPublic,
    MessageIn,
    OpsSnapshot,
    QueueState,
    ReplayIn,
    ReplayProgress,
    RetryIn,
    RetryOut,
    SearchIn,
    Series,
    SessionList,
    SessionMessagesPublic,
    TenantCreated,
    TenantIn,
    TenantPublic,
    TiersPublic,
    TranscriptLine,
    TurnAccepted,
    TurnIn,
    UserDeleted,
    UserExport,
    UserList,
    UserRunList,
    VectorStats,
    WebhookCreated,
    WebhookIn,
    WebhookList,
    WebhookOps,
    WebhookPing,
    WebhookPublic,
    WebhookUpdate,
    WorkerInfo,
)

JOB_FINISHED = frozenset({"done", "skipped", "failed", "dropped"})
RUN_FINISHED = frozenset({"done", "cannot_fit", "partial", "stale", "failed"})
REPLAY_FINISHED = frozenset({"cancelled", "done"})
Message = str | MessageIn


def _user(user_id: str) -> str:
    return f"/v1/users/{segment(user_id)}"


def _session(session_id: str) -> str:
    return f"/v1/sessions/{segment(session_id)}"


def _memories_query(
    types: Sequence[FactType], include_superseded: bool, quarantined: bool | None
) -> dict[str, Any]:
    return {
        "type": list(types),
        "include_superseded": include_superseded or None,
        "quarantined": quarantined,
    }


def _job(job_id: str) -> Call[JobPublic]:
    return Call("GET", f"/v1/jobs/{segment(job_id)}", reads(JobPublic))


def _compression_run(session_id: str, run_id: str) -> Call[CompressionRunPublic]:
    path = f"{_session(session_id)}/compression/runs/{segment(run_id)}"
    return Call("GET", path, reads(CompressionRunPublic))


def _replay(job_id: str) -> Call[ReplayProgress]:
    return Call("GET", f"/v1/replay/{segment(job_id)}", reads(ReplayProgress))


class HasStatus(Protocol):
    @property
    def status(self) -> str: ...


S = TypeVar("S", bound=HasStatus)


def _until(
    call: Call[S], finished: frozenset[str], timeout: float, interval: float, what: str
) -> Poll[S]:
    return Poll(call, lambda value: value.status in finished, timeout, interval, what)


class Endpoints:
    # -- turns and jobs -------------------------------------------------------------------

    @endpoint
    def store_turn(
        self,
        session_id: str,
        *,
        user_id: str,
        user_message: Message,
        assistant_message: Message | None = None,
        created_at: dt.datetime | None = None,
    ) -> Call[TurnAccepted]:
        """Store one exchange and queue its extraction (202). Give the messages
        `external_id`s to make re-sending safe: a stored turn comes back `duplicate`."""
        turn = body(
            TurnIn,
            user_id=user_id,
            user_message=user_message,
            assistant_message=assistant_message,
            created_at=created_at,
        )
        return Call("POST", f"{_session(session_id)}/turns", reads(TurnAccepted), body=turn)

    @endpoint
    def import_messages(
        self, messages: Sequence[TranscriptLine | Mapping[str, Any]]
    ) -> Call[ImportAccepted]:
        """Transcript lines (≤1000 a call), as `tiermem import FILE.jsonl` reads them."""
        lines = [m if isinstance(m, TranscriptLine) else dict(m) for m in messages]
        payload = body(ImportIn, messages=lines)
        return Call("POST", "/v1/import", reads(ImportAccepted), body=payload)

    @endpoint
    def get_job(self, job_id: str) -> Call[JobPublic]:
        return _job(job_id)

    @endpoint
    def wait_for_job(
        self, job_id: str, *, timeout: float = 60.0, interval: float = 0.25
    ) -> Poll[JobPublic]:
        """The job once `done`, `skipped`, `failed` or `dropped` (returned, not raised: read
        `status` and `error`); WaitTimedOut after `timeout` seconds."""
        return _until(_job(job_id), JOB_FINISHED, timeout, interval, f"job {job_id}")

    # -- memories ---------------------------------------------------------------------------

    @endpoint
    def list_memories(
        self,
        user_id: str,
        *,
        types: Sequence[FactType] = (),
        include_superseded: bool = False,
        quarantined: bool | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> Call[MemoriesPublic]:
        """One page (`data`) and the `count` of all that match."""
        params = query_params(
            **_memories_query(types, include_superseded, quarantined), limit=limit, offset=offset
        )
        return Call("GET", f"{_user(user_id)}/memories", reads(MemoriesPublic), params)

    @paged
    def iter_memories(
        self,
        user_id: str,
        *,
        types: Sequence[FactType] = (),
        include_superseded: bool = False,
        quarantined: bool | None = None,
        page_size: int = 100,
    ) -> Pages[MemoryPublic]:
        """Every matching memory, asking `page_size` at a time."""
        filters = _memories_query(types, include_superseded, quarantined)

        def page(offset: int) -> Call[list[MemoryPublic]]:
            params = query_params(**filters, limit=page_size, offset=offset)
            read = reads(MemoriesPublic)
            return Call("GET", f"{_user(user_id)}/memories", lambda b: read(b).data, params)

        return Pages(page, page_size)

    @endpoint
    def get_memory(self, user_id: str, memory_id: str) -> Call[MemoryPublic]:
        path = f"{_user(user_id)}/memories/{segment(memory_id)}"
        return Call("GET", path, reads(MemoryPublic))

    @endpoint
    def search_memories(
        self,
        user_id: str,
        query: str,
        *,
        k: int = 10,
        types: Sequence[FactType] = (),
        min_score: float | None = None,
    ) -> Call[MemoriesPublic]:
        """Memories by meaning, each with its cosine `score`, best first."""
        search = body(SearchIn, query=query, k=k, types=list(types), min_score=min_score)
        path = f"{_user(user_id)}/memories/search"
        return Call("POST", path, reads(MemoriesPublic), body=search)

    @endpoint
    def delete_memory(self, user_id: str, memory_id: str) -> Call[None]:
        path = f"{_user(user_id)}/memories/{segment(memory_id)}"
        return Call("DELETE", path, reads_nothing)

    @endpoint
    def search_history(
        self,
        user_id: str,
        q: str,
        *,
        k: int = 10,
        exclude_session_id: str | None = None,
        around: int = 0,
    ) -> Call[MessageHitsPublic]:
        """Earlier messages from any of the user's sessions, by words and meaning."""
        params = query_params(q=q, k=k, exclude_session_id=exclude_session_id, around=around)
        path = f"{_user(user_id)}/history/search"
        return Call("GET", path, reads(MessageHitsPublic), params)

    @endpoint
    def get_beliefs(self, user_id: str) -> Call[BeliefTimeline]:
        """Per slot (employer, location, a pet), every value it held, when each began and
        ended, and the fact and message that superseded or ended it."""
        return Call("GET", f"{_user(user_id)}/beliefs", reads(BeliefTimeline))

    # -- users, their sessions and runs -----------------------------------------------------

    @endpoint
    def list_users(
        self, *, q: str | None = None, limit: int = 50, offset: int = 0
    ) -> Call[UserList]:
        """The key's tenant's users, most recently active first; `q`: ids containing it."""
        params = query_params(q=q, limit=limit, offset=offset)
        return Call("GET", "/v1/users", reads(UserList), params)

    @endpoint
    def list_sessions(self, user_id: str, *, limit: int = 50, offset: int = 0) -> Call[SessionList]:
        params = query_params(limit=limit, offset=offset)
        return Call("GET", f"{_user(user_id)}/sessions", reads(SessionList), params)

    @endpoint
    def list_runs(
        self, user_id: str, *, status: Sequence[str] = (), limit: int = 50, offset: int = 0
    ) -> Call[UserRunList]:
        """The user's extraction runs, newest first; `status`: only these (e.g. failed)."""
        params = query_params(status=list(status), limit=limit, offset=offset)
        return Call("GET", f"{_user(user_id)}/runs", reads(UserRunList), params)

    @endpoint
    def export_user(self, user_id: str) -> Call[UserExport]:
        return Call("GET", f"{_user(user_id)}/export", reads(UserExport))

    @endpoint
    def delete_user(self, user_id: str) -> Call[UserDeleted]:
        """Every row and vector of the user; nothing of theirs is searchable afterwards."""
        return Call("DELETE", _user(user_id), reads(UserDeleted))

    # -- context and chat ---------------------------------------------------------------

    @endpoint
    def get_context(
        self,
        session_id: str,
        *,
        query: str | None = None,
        budget_tokens: int | None = None,
        user_id: str | None = None,
    ) -> Call[ContextPublic]:
        """What to put in front of the model before the next message, within the budget.
        `user_id` is needed only before the session's first turn."""
        params = query_params(query=query, budget_tokens=budget_tokens, user_id=user_id)
        return Call("GET", f"{_session(session_id)}/context", reads(ContextPublic), params)

    @endpoint
    def chat(
        self,
        *,
        user_id: str,
        session_id: str,
        message: Message,
        model: str | None = None,
        budget_tokens: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Call[ChatPublic]:
        """One memory-augmented turn: context, chat model, reply; the turn is stored."""
        return _chat_call(locals())

    @streamed
    def chat_stream(
        self,
        *,
        user_id: str,
        session_id: str,
        message: Message,
        model: str | None = None,
        budget_tokens: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Call[ChatPublic]:
        """`chat` as the reply is written: iterate the deltas; then `.result` holds the
        stored turn's ids and usage."""
        return _chat_call(locals(), stream=True)

    # -- sessions: messages, tiers, compression, continuation ---------------------------------

    @endpoint
    def list_messages(
        self, session_id: str, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> Call[SessionMessagesPublic]:
        """A page of the session's stored messages (`seq` order; `newest_first` from the end)
        and their `count`. NotFound before the session's first message."""
        params = query_params(limit=limit, offset=offset, newest_first=newest_first or None)
        path = f"{_session(session_id)}/messages"
        return Call("GET", path, reads(SessionMessagesPublic), params)

    @endpoint
    def get_tiers(self, session_id: str) -> Call[TiersPublic]:
        return Call("GET", f"{_session(session_id)}/tiers", reads(TiersPublic))

    @endpoint
    def compact(self, session_id: str, *, focus: str | None = None) -> Call[CompressionRunPublic]:
        """Run the compression loop now (202); follow it with wait_for_compression_run."""
        path = f"{_session(session_id)}/compact"
        return Call("POST", path, reads(CompressionRunPublic), body=body(CompactIn, focus=focus))

    @endpoint
    def list_compression_runs(
        self, session_id: str, *, limit: int = 50, offset: int = 0
    ) -> Call[CompressionRunList]:
        path = f"{_session(session_id)}/compression/runs"
        return Call(
            "GET", path, reads(CompressionRunList), query_params(limit=limit, offset=offset)
        )

    @endpoint
    def get_compression_run(self, session_id: str, run_id: str) -> Call[CompressionRunPublic]:
        return _compression_run(session_id, run_id)

    @endpoint
    def wait_for_compression_run(
        self, session_id: str, run_id: str, *, timeout: float = 120.0, interval: float = 0.5
    ) -> Poll[CompressionRunPublic]:
        run = _compression_run(session_id, run_id)
        return _until(run, RUN_FINISHED, timeout, interval, f"compression run {run_id}")

    @endpoint
    def get_compression_settings(self, session_id: str) -> Call[CompressionSettingsPublic]:
        path = f"{_session(session_id)}/compression"
        return Call("GET", path, reads(CompressionSettingsPublic))

    @endpoint
    def set_compression_settings(
        self,
        session_id: str,
        *,
        enabled: bool | None = None,
        context_limit_tokens: int | None = None,
        trigger_ratio: float | None = None,
        target_ratio: float | None = None,
        current_share: float | None = None,
        topics_share: float | None = None,
        bulks_share: float | None = None,
        pin_head: bool | None = None,
    ) -> Call[CompressionSettingsPublic]:
        """Replace the session's overrides (what is left out comes from the deployment)."""
        fields = {k: v for k, v in locals().items() if k not in ("self", "session_id")}
        path = f"{_session(session_id)}/compression"
        settings = body(CompressionSettingsIn, **fields)
        return Call("PUT", path, reads(CompressionSettingsPublic), body=settings)

    @endpoint
    def continue_session(
        self, session_id: str, *, new_session_id: str | None = None
    ) -> Call[ContinuePublic]:
        """A child session seeded with this one's tiers (201)."""
        path = f"{_session(session_id)}/continue"
        child = body(ContinueIn, session_id=new_session_id)
        return Call("POST", path, reads(ContinuePublic), body=child)

    # -- admin: tenants and keys ----------------------------------------------------------

    @endpoint
    def create_tenant(self, name: str) -> Call[TenantCreated]:
        """Operator key: a tenant and its first app key (shown once)."""
        tenant = body(TenantIn, name=name)
        return Call("POST", "/v1/admin/tenants", reads(TenantCreated), body=tenant)

    @endpoint
    def list_tenants(self) -> Call[list[TenantPublic]]:
        return Call("GET", "/v1/admin/tenants", reads_list(TenantPublic))

    @endpoint
    def create_key(
        self, tenant_id: str, *, name: str = "", scope: Literal["app", "admin"] = "app"
    ) -> Call[KeyCreated]:
        path = f"/v1/admin/tenants/{segment(tenant_id)}/keys"
        return Call("POST", path, reads(KeyCreated), body=body(KeyIn, name=name, scope=scope))

    # -- admin: ops ----------------------------------------------------------------------

    @endpoint
    def ops_queues(self, *, failed_limit: int = 20) -> Call[OpsSnapshot]:
        params = query_params(failed_limit=failed_limit)
        return Call("GET", "/v1/ops/queues", reads(OpsSnapshot), params)

    @endpoint
    def ops_workers(self) -> Call[list[WorkerInfo]]:
        return Call("GET", "/v1/ops/workers", reads_list(WorkerInfo))

    @endpoint
    def ops_timeseries(self, *, minutes: int = 60) -> Call[Series]:
        return Call("GET", "/v1/ops/timeseries", reads(Series), query_params(minutes=minutes))

    @endpoint
    def ops_vectors(self) -> Call[VectorStats]:
        return Call("GET", "/v1/ops/vectors", reads(VectorStats))

    @endpoint
    def retry_runs(
        self, *, run_ids: Sequence[str] | None = None, tenant_id: str | None = None
    ) -> Call[RetryOut]:
        """Failed extraction runs back to pending (without run_ids: every failed one)."""
        ids = list(run_ids) if run_ids is not None else None
        retry = body(RetryIn, run_ids=ids, tenant_id=tenant_id)
        return Call("POST", "/v1/ops/runs/retry", reads(RetryOut), body=retry)

    @endpoint
    def pause_queue(self, queue: str) -> Call[QueueState]:
        return Call("POST", f"/v1/ops/queues/{segment(queue)}/pause", reads(QueueState))

    @endpoint
    def resume_queue(self, queue: str) -> Call[QueueState]:
        return Call("POST", f"/v1/ops/queues/{segment(queue)}/resume", reads(QueueState))

    # -- webhooks and the events feed (ADR 0027) ---------------------------------------------

    @endpoint
    def create_webhook(
        self,
        url: str,
        events: Sequence[str],
        *,
        secret: str | None = None,
        description: str = "",
        tenant_id: str | None = None,
    ) -> Call[WebhookCreated]:
        """Admin key: a subscription; its `secret` (generated unless given) is shown once."""
        hook = body(
            WebhookIn,
            url=url,
            events=list(events),
            secret=secret,
            description=description,
            tenant_id=tenant_id,
        )
        return Call("POST", "/v1/webhooks", reads(WebhookCreated), body=hook)

    @endpoint
    def list_webhooks(self) -> Call[WebhookList]:
        return Call("GET", "/v1/webhooks", reads(WebhookList))

    @endpoint
    def get_webhook(self, webhook_id: str) -> Call[WebhookPublic]:
        return Call("GET", f"/v1/webhooks/{segment(webhook_id)}", reads(WebhookPublic))

    @endpoint
    def update_webhook(
        self,
        webhook_id: str,
        *,
        url: str | None = None,
        events: Sequence[str] | None = None,
        description: str | None = None,
        enabled: bool | None = None,
        secret: str | None = None,
    ) -> Call[WebhookPublic]:
        """Only what is given changes; `enabled=True` also resumes one disabled by failure."""
        change = body(
            WebhookUpdate,
            url=url,
            events=list(events) if events is not None else None,
            description=description,
            enabled=enabled,
            secret=secret,
        )
        path = f"/v1/webhooks/{segment(webhook_id)}"
        return Call("PATCH", path, reads(WebhookPublic), body=change)

    @endpoint
    def delete_webhook(self, webhook_id: str) -> Call[None]:
        return Call("DELETE", f"/v1/webhooks/{segment(webhook_id)}", reads_nothing)

    @endpoint
    def test_webhook(self, webhook_id: str) -> Call[WebhookPing]:
        """A signed `webhook.test` event sent now; what the receiver answered."""
        return Call("POST", f"/v1/webhooks/{segment(webhook_id)}/test", reads(WebhookPing))

    @endpoint
    def events(self, *, after: int = 0, limit: int = 100) -> Call[EventPage]:
        """The tenant's events after the cursor `after`, in order; read on from next_cursor."""
        params = query_params(after=after, limit=limit)
        return Call("GET", "/v1/events", reads(EventPage), params)

    @endpoint
    def ops_webhooks(self, *, failed_limit: int = 20) -> Call[WebhookOps]:
        params = query_params(failed_limit=failed_limit)
        return Call("GET", "/v1/ops/webhooks", reads(WebhookOps), params)

    # -- admin: replay ---------------------------------------------------------------------

    @endpoint
    def start_replay(
        self,
        *,
        mode: Literal["dry_run", "apply", "rebuild"],
        tenant_id: str | None = None,
        user_ids: Sequence[str] | None = None,
        session_ids: Sequence[str] | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        stale_only: bool = False,
    ) -> Call[ReplayProgress]:
        """Re-run extraction over stored turns (202); follow it with wait_for_replay."""
        replay = body(
            ReplayIn,
            mode=mode,
            tenant_id=tenant_id,
            user_ids=list(user_ids) if user_ids is not None else None,
            session_ids=list(session_ids) if session_ids is not None else None,
            since=since,
            until=until,
            stale_only=stale_only or None,
        )
        return Call("POST", "/v1/replay", reads(ReplayProgress), body=replay)

    @endpoint
    def list_replays(self) -> Call[list[ReplayProgress]]:
        return Call("GET", "/v1/replay", reads_list(ReplayProgress))

    @endpoint
    def get_replay(self, job_id: str) -> Call[ReplayProgress]:
        return _replay(job_id)

    @endpoint
    def wait_for_replay(
        self, job_id: str, *, timeout: float = 600.0, interval: float = 1.0
    ) -> Poll[ReplayProgress]:
        return _until(_replay(job_id), REPLAY_FINISHED, timeout, interval, f"replay {job_id}")

    @endpoint
    def cancel_replay(self, job_id: str) -> Call[ReplayProgress]:
        return Call("POST", f"/v1/replay/{segment(job_id)}/cancel", reads(ReplayProgress))

    @endpoint
    def resume_replay(self, job_id: str) -> Call[ReplayProgress]:
        return Call("POST", f"/v1/replay/{segment(job_id)}/resume", reads(ReplayProgress))


def _chat_call(arguments: dict[str, Any], *, stream: bool = False) -> Call[ChatPublic]:
    fields = {k: v for k, v in arguments.items() if k != "self"}
    return Call("POST", "/v1/chat", reads(ChatPublic), body=body(ChatIn, **fields, stream=stream))
