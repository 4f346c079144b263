"""The one place settings are read: environment variables prefixed TIERMEM_, nested with "__"."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_ADMIN_KEY = "dev-admin-key"
DEV_APP_KEY = "dev-app-key"
DEV_SECRET_KEY = "dev-secret-key-change-me"


class LLMSettings(BaseModel):
    """The auxiliary model used for extraction (and, later, summaries)."""

    base_url: str | None = None  # unset → the offline rule-based extractor is used
    api_key: str = "not-needed"
    model: str = "gpt-4o-mini"
    timeout_s: float = 30.0
    # "json_schema" for servers that support structured outputs (OpenAI, vLLM, Ollama,
    # llama.cpp's llama-server); "json_object+schema" for llama-cpp-python's server, which
    # takes the schema inside a json_object response_format and decodes by it;
    # "json_object" for servers that only know JSON mode (the schema goes in the prompt).
    response_format: Literal["json_schema", "json_object+schema", "json_object"] = "json_schema"
    # A server that refuses a format (llama-cpp-python's answers json_schema with HTTP 500,
    # others 400) gets the same call again at once one step down: json_object+schema, then
    # json_object; what works is kept for this base_url and model (ADR 0018, 0021).
    fallback_to_json_object: bool = True
    temperature: float = 0.0
    max_tokens: int = 1500
    # For the ops view's cost estimate only (USD per million tokens; gpt-4o-mini's list price).
    prompt_usd_per_million: float = Field(default=0.15, ge=0)
    completion_usd_per_million: float = Field(default=0.60, ge=0)


class ChatSettings(BaseModel):
    """The strong model that answers users (POST /v1/chat, /v1/chat/completions); unset
    fields fall back to the extraction LLM's."""

    base_url: str | None = None
    api_key: str | None = None  # unset → the LLM's key, only when base_url is the LLM's too
    model: str = "gpt-4o"
    timeout_s: float = 60.0
    max_tokens: int | None = None
    context_limit_tokens: int = 128_000


class ContextSettings(BaseModel):
    """How the context before each message is assembled (GET /v1/sessions/{id}/context)."""

    default_budget_tokens: int = 4000
    # Shares of the budget; what one section leaves unused flows to the next.
    memories_share: float = 0.3
    earlier_messages_share: float = 0.2
    history_share: float = 0.5
    max_memories: int = 30
    max_earlier_messages: int = 40
    min_memory_score: float = 0.2  # cosine floor before blending
    # Ranking blend for memories: similarity, recency (half-life in days), mention count.
    weight_similarity: float = 0.75
    weight_recency: float = 0.15
    weight_mentions: float = 0.10
    recency_half_life_days: float = 90.0
    # History search: a hit's score is its BM25 over the best candidate's (0-1) plus this
    # weight × its cosine similarity to the query (ADR 0014) ...
    history_vector_weight: float = 1.5
    # ... plus this when the query names who said it ("What did Caroline research?").
    history_speaker_bonus: float = 0.1
    rrf_k: int = 60  # reciprocal rank fusion constant, when SQL full-text answers history search


class EmbeddingSettings(BaseModel):
    provider: Literal["local", "openai"] = "local"
    # local: a folder or file holding model.onnx; unset → the packaged int8 MiniLM
    model_path: str | None = None
    # openai-compatible provider
    base_url: str | None = None
    api_key: str = "not-needed"
    model: str = "text-embedding-3-small"
    dim: int = 384
    batch_size: int = 32
    cache_size: int = 10_000
    threads: int = 1  # onnxruntime intra-op threads per call; workers run many calls at once


class QdrantSettings(BaseModel):
    """Exactly one of url / path / in_memory decides where vectors live."""

    url: str | None = None  # a Qdrant server or cluster: the production path
    api_key: str | None = None
    path: str | None = None  # an embedded Qdrant Edge folder; unset (no url) → <data_dir>/vectors
    in_memory: bool = False  # qdrant-client's in-memory mode: tests and development only
    collection_prefix: str = "tm_"
    # per_user: a collection per user (few, large users); partitioned: a collection per
    # tenant with the user's keyed hash as an is_tenant payload index (many users; Qdrant's
    # multitenancy guidance). ADR 0011; after changing it, `tiermem reindex` moves the store.
    layout: Literal["partitioned", "per_user"] = "partitioned"
    # Where vectors and payloads live. disk: read through the page cache, RSS grows with the
    # users searched, not stored (100k users: docs/benchmarks.md); ram: pinned, ~2 ms faster
    # a search in the engine, RSS grows with every vector. Shards are made with it; `tiermem
    # compact` moves shards made otherwise (the engine never does). On a server: on_disk for
    # new collections.
    vector_memory: Literal["disk", "ram"] = "disk"

    @model_validator(mode="before")
    @classmethod
    def _refuse_the_local_engine(cls, data: Any) -> Any:
        # TIERMEM_QDRANT__ENGINE chose between Qdrant Edge and qdrant-client's local mode
        # until local mode was removed (ADR 0012). `edge` is ignored like any unknown
        # setting; `local` is refused, since ignoring it would quietly serve an empty Edge
        # store in place of the folder the user meant.
        engine = data.get("engine") if isinstance(data, dict) else None
        if engine is not None and str(engine).strip().lower() != "edge":
            raise ValueError(
                f"TIERMEM_QDRANT__ENGINE={engine} is no longer supported: qdrant-client's "
                "local mode was removed and the embedded engine is Qdrant Edge (ADR 0012). "
                "Unset TIERMEM_QDRANT__ENGINE, then run `tiermem reindex` once: it rebuilds "
                "every user's vectors from SQL in the Edge folder (<data dir>/vectors unless "
                "TIERMEM_QDRANT__PATH says otherwise); the old local-mode folder can then be "
                "deleted. Or point TIERMEM_QDRANT__URL at a Qdrant server."
            )
        return data


class RedisSettings(BaseModel):
    lock_timeout_s: float = 30.0  # a per-user memory-write lock expires after this
    lock_wait_s: float = 60.0  # how long a writer waits for the lock before retrying the task
    # Unacked messages of a dead worker come back after this many seconds.
    visibility_timeout_s: int = 900


class DatabaseSettings(BaseModel):
    busy_timeout_ms: int = 10_000
    auto_migrate: bool = True  # run alembic upgrade head at startup
    echo: bool = False
    pool_size: int = 10
    # An API process commits the POST /turns requests that arrive together in one
    # transaction, up to this many (shared/flows/store_turn.py); 1 = a transaction per turn.
    turn_batch_max: int = Field(default=64, ge=1)
    # A POST /turns that waits longer than this for its commit gets 503 (retry).
    turn_timeout_s: float = Field(default=30.0, gt=0)


class WorkerSettings(BaseModel):
    # Extraction is one slow LLM call then a short embedding: threads overlap the waits
    # and onnxruntime releases the GIL. See docs/decisions/0003-worker-pool.md.
    pool: Literal["threads", "prefork", "solo"] = "threads"
    concurrency: int = 48  # > target rate x LLM latency (30/s x ~1 s); docs/benchmarks.md
    max_retries: int = 5
    retry_backoff_max_s: int = 300
    sweep_interval_s: float = 60.0
    # Pending work older than this is re-enqueued by the sweeper (the outbox).
    sweep_pending_after_s: float = 120.0
    # A run stuck in "running" this long is assumed lost with its worker.
    sweep_running_after_s: float = 900.0
    # Each worker writes its ops record (GET /v1/ops/workers) this often; one missing for
    # three intervals is gone.
    heartbeat_s: float = Field(default=5.0, gt=0)
    # Celery task events (what Flower's task pages show). Off by default: publishing them
    # was ~18 % of a busy worker's GIL time (bench/results/extraction.md); tiermem's own
    # ops views read SQL and the heartbeats instead.
    task_events: bool = False
    # The Celery node name of `tiermem worker` (its -n: `%h` is the host name, `@<host>` is
    # added to a name without one). Unset: tiermem-<queues>-<pid>@<host>, unique per process;
    # ops tells workers and the runs each claimed by it, so a name set here must be too.
    name: str | None = None


class ReplaySettings(BaseModel):
    """Re-extraction over stored turns (POST /v1/replay), on the `replay` queue."""

    # Threads that take replay turns, apart from live extraction's: `tiermem serve` and
    # `tiermem worker --replay-concurrency` run them in the same process (embedded Qdrant
    # allows one); with a Qdrant server run `tiermem worker --queues replay` instead.
    concurrency: int = Field(default=4, ge=1)
    # Celery rate limit of replay turns per worker process ("20/s", "600/m"; "" = none):
    # keeps a big replay from spending the LLM quota live turns need.
    rate_limit: str = "20/s"
    # The dispatcher keeps at most this many replay turns in the broker at once and tops
    # the queue up every `dispatch_interval_s`: millions of old turns never flood Redis.
    max_queued: int = Field(default=500, ge=1)
    dispatch_interval_s: float = Field(default=2.0, gt=0)


class ExtractionSettings(BaseModel):
    max_facts_per_turn: int = 10
    min_confidence: float = 0.3
    dedup_threshold: float = 0.9  # cosine at or above → same fact (within one type)
    max_message_chars: int = 16_000
    prefilter: bool = True
    # What the LLM extractor reads beside the turn, marked as context (facts still come only
    # from what the person says in the turn): the session's messages before it, at most
    # context_messages of them within context_tokens, and the person's active facts nearest
    # the turn (context_facts), with the attribute names they use, so the model reuses them.
    context_messages: int = Field(default=6, ge=0, le=50)
    context_tokens: int = Field(default=600, ge=0, le=8000)
    context_facts: int = Field(default=8, ge=0, le=50)
    # One LLM call for several turns of a session (ADR 0024). 1: each turn is extracted alone
    # as soon as it is stored (the default). N > 1: a stored turn waits (status "waiting")
    # until N turns of its session wait, or until the session has had no new turn for
    # batch_quiet_s, then one call extracts the waiting turns in order (at most N per call).
    # Only the LLM extractor batches; replays extract one turn per call.
    batch_turns: int = Field(default=1, ge=1, le=32)
    batch_quiet_s: float = Field(default=30.0, gt=0, le=3600)
    # The extraction model's context window (or less): a batch call's prompt plus the reply
    # room of one turn (TIERMEM_LLM__MAX_TOKENS) must fit, or the batch is split into calls
    # that do.
    batch_max_tokens: int = Field(default=8192, ge=1024)
    # When every item of the model's reply is dropped (questions written as facts, the
    # assistant's words, ...), tell it why in the same conversation and ask once more
    # (ADR 0031): one more call, only on such turns. Off: such a run ends `dropped` at once.
    ask_again_when_dropped: bool = True
    # Known facts the model's reply touched (an item shares their words or attribute) that it
    # is then asked about, one short follow-up each: what is their value now (ADR 0032)? A
    # new value in the person's own words replaces the fact, "none" ends it. 0: never asked.
    ending_checks_per_turn: int = Field(default=4, ge=0, le=8)
    # Whether those questions also cover known likings, habits and hobbies (no one value to
    # ask for), the person's message touching them too: how does the person feel about it
    # now? An answer that says it stopped ends it (llm-11). Within ending_checks_per_turn,
    # after the facts with one value.
    liking_checks: bool = True
    # Whether they also cover the person's known active goals the turn touched: what is the
    # goal now? An answer that says it stopped ends it (llm-12). Within ending_checks_per_turn,
    # beside the likings.
    goal_checks: bool = True
    # Whether a known fact the person's message names (a word of substance in common), and
    # the one nearest the turn by meaning (llm-14), is asked whether it is still true, the
    # answer decoded as "yes" or "no", when no question above covers it (a goal, an allergy,
    # a decision, a fact of several values) or its value question changed nothing; "no" ends
    # it (llm-13). Within ending_checks_per_turn; the facts the message names go first.
    still_true_checks: bool = True


class CompressionSettings(BaseModel):
    """The 50/30/20 loop (shared.compression). The first block can be overridden per session
    (PUT /v1/sessions/{id}/compression); the rest is per deployment."""

    enabled: bool = True
    context_limit_tokens: int = Field(default=128_000, ge=1)
    trigger_ratio: float = 0.7  # compress when the history passes this share of the limit
    target_ratio: float = 0.5  # ... down to this share, split between the tiers below
    current_share: float = Field(default=0.5, ge=0)
    topics_share: float = Field(default=0.3, ge=0)
    bulks_share: float = Field(default=0.2, ge=0)
    # Keep the session's first exchange verbatim outside the split (project background),
    # unless it would take more than head_max_share of the target.
    pin_head: bool = True
    head_max_share: float = Field(default=0.2, ge=0, le=1)

    max_iterations: int = Field(default=100, ge=1)  # per run; a run that hits it continues later
    chunk_max_tokens: int = Field(default=8000, ge=1)  # summarizer input per call
    min_summary_tokens: int = Field(default=24, ge=1)  # a lone bulk this short is final
    max_summary_tokens: int = Field(default=1024, ge=1)
    topic_ratio: float = Field(default=0.25, gt=0, lt=1)  # messages → topic block
    bulk_ratio: float = Field(default=0.5, gt=0, lt=1)  # topics → bulk, bulks → bulk
    # A run holds the session's lock for at most lock_timeout_s (then the version check is
    # the only guard); a second run waits lock_wait_s, then its task retries later.
    lock_timeout_s: float = 600.0
    lock_wait_s: float = 5.0

    @model_validator(mode="after")
    def _check_shares(self) -> CompressionSettings:
        total = self.current_share + self.topics_share + self.bulks_share
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"compression shares must sum to 1, got {total:.3f}")
        if not 0 < self.target_ratio < self.trigger_ratio <= 1:
            raise ValueError("compression needs 0 < target_ratio < trigger_ratio <= 1")
        if self.min_summary_tokens > self.max_summary_tokens:
            raise ValueError("compression needs min_summary_tokens <= max_summary_tokens")
        return self


class WebhookSettings(BaseModel):
    """Events pushed to the backend (POST /v1/webhooks, ADR 0027): delivered by the workers
    from the events outbox, at least once, signed the Standard Webhooks way."""

    # How often beat (or `tiermem serve`'s sweeper thread) turns new events into deliveries
    # and sends the due ones: an event reaches its receiver within about this long.
    poll_interval_s: float = Field(default=1.0, gt=0)
    # One delivery's HTTP request gives up after this long (counted as a failed attempt).
    timeout_s: float = Field(default=10.0, gt=0)
    # A failed attempt is retried after retry_base_s x 2^(attempts-1), at most retry_max_s,
    # with up to 20 % jitter; a delivery is retried until it succeeds (or its subscription
    # is disabled: it then waits, and goes out when the subscription is enabled again).
    retry_base_s: float = Field(default=5.0, gt=0)
    retry_max_s: float = Field(default=3600.0, gt=0)
    # A subscription whose deliveries failed this many times in a row, for at least
    # disable_after_s since its first failure, is disabled (enabled=false, disabled_reason);
    # PATCH /v1/webhooks/{id} {"enabled": true} turns it back on with its backlog.
    disable_after_failures: int = Field(default=50, ge=1)
    disable_after_s: float = Field(default=24 * 3600.0, ge=0)
    # A delivery sent to a worker is claimed this long; a worker killed mid-delivery leaves
    # it to be sent again after it (with the same webhook-id). Keep above timeout_s.
    claim_s: float = Field(default=60.0, gt=0)
    # Deliveries in the broker at once (the maintenance queue): a backlog for a dead
    # receiver never floods it or holds up the outbox sweeps.
    max_in_flight: int = Field(default=100, ge=1)
    # Receivers on loopback or private addresses (the tests' own, a sidecar): refused in
    # production unless allowed, since a tenant admin could otherwise make the workers call
    # internal services.
    allow_private_urls: bool = False

    @model_validator(mode="after")
    def _check(self) -> WebhookSettings:
        if self.claim_s <= self.timeout_s:
            raise ValueError("webhooks need claim_s > timeout_s (a claim outlives its request)")
        return self


class AuthSettings(BaseModel):
    # Unset in development → "dev-admin-key"; production refuses to start without one.
    admin_key: str | None = None
    # Development only: a tenant `dev_tenant` with this app key ("dev-app-key" when unset)
    # is ensured at startup so the README's curl lines work on a fresh machine.
    dev_app_key: str | None = None
    dev_tenant: str = "default"
    # Each API process remembers a valid key's tenant and scope this long, so the hot path
    # skips a database read; a key revoked in SQL keeps working up to this long. 0 = off.
    key_cache_s: float = Field(default=30.0, ge=0)


class MCPSettings(BaseModel):
    """`tiermem mcp` (stdio): a thin client of a running tiermem API (ADR 0016)."""

    url: str = "http://127.0.0.1:8000"  # the API's base URL, without /v1
    api_key: str | None = None  # the app key whose tenant's users the tools reach
    timeout_s: float = Field(default=30.0, gt=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TIERMEM_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
    )

    environment: Literal["development", "production"] = "development"
    data_dir: Path = Path(".tiermem")
    # Keys the collection-name hash; changing it orphans existing collections.
    secret_key: str = DEV_SECRET_KEY
    database_url: str | None = None  # unset → SQLite file in data_dir
    redis_url: str | None = None  # unset → in-process broker (only for `tiermem serve`)
    log_level: str = "INFO"
    # uvicorn's line per request; off by default because it cost ~4 % of a turn's API CPU
    # (bench/results/ingest.md) and a proxy in front usually logs requests already.
    access_log: bool = False
    host: str = "127.0.0.1"
    port: int = 8000

    llm: LLMSettings = Field(default_factory=LLMSettings)
    chat: ChatSettings = Field(default_factory=ChatSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    replay: ReplaySettings = Field(default_factory=ReplaySettings)
    compression: CompressionSettings = Field(default_factory=CompressionSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    mcp: MCPSettings = Field(default_factory=MCPSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'tiermem.db').as_posix()}"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def qdrant_path(self) -> str | None:
        if self.qdrant.url or self.qdrant.in_memory:
            return None
        return self.qdrant.path or str(self.data_dir / "vectors")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def extractor_kind(self) -> Literal["llm", "offline"]:
        return "llm" if self.llm.base_url else "offline"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def admin_key(self) -> str | None:
        if self.auth.admin_key:
            return self.auth.admin_key
        return DEV_ADMIN_KEY if self.environment == "development" else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def dev_app_key(self) -> str | None:
        if self.environment != "development":
            return None
        return self.auth.dev_app_key or DEV_APP_KEY

    @model_validator(mode="after")
    def _check(self) -> Settings:
        q = self.qdrant
        if sum([bool(q.url), bool(q.path), q.in_memory]) > 1:
            raise ValueError("set only one of TIERMEM_QDRANT__URL, __PATH, __IN_MEMORY")
        if self.environment == "production":
            problems = []
            if self.secret_key == DEV_SECRET_KEY or len(self.secret_key) < 32:
                problems.append("TIERMEM_SECRET_KEY must be set to 32+ random characters")
            if not self.auth.admin_key or self.auth.admin_key == DEV_ADMIN_KEY:
                problems.append("TIERMEM_AUTH__ADMIN_KEY must be set to a non-default key")
            elif len(self.auth.admin_key) < 24:
                problems.append("TIERMEM_AUTH__ADMIN_KEY must be at least 24 characters")
            if self.auth.dev_app_key:
                problems.append("TIERMEM_AUTH__DEV_APP_KEY is for development only; unset it")
            if problems:
                raise ValueError("unsafe production settings: " + "; ".join(problems))
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
