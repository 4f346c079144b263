/** `Client`: every /v1 route a chat backend or an admin uses, with the Python SDK's method
 * names in camelCase. Arguments are camelCase; answers are the API's JSON as it is
 * (snake_case), typed from the OpenAPI document. */

import { ChatStream } from "./chat-stream.js";
import { WaitTimedOut } from "./errors.js";
import { sleep, Transport, type ClientOptions } from "./http.js";
import type {
  BeliefTimeline,
  ChatPublic,
  CompressionRunList,
  CompressionRunPublic,
  CompressionSettingsPublic,
  ContextPublic,
  ContinuePublic,
  FactType,
  ImportAccepted,
  JobPublic,
  KeyCreated,
  MemoriesPublic,
  MemoryPublic,
  Message,
  MessageHitsPublic,
  OpsSnapshot,
  QueueState,
  ReplayProgress,
  RetryOut,
  Series,
  RunStatus,
  SessionList,
  SessionMessagesPublic,
  TenantCreated,
  TenantPublic,
  TiersPublic,
  TranscriptLine,
  TurnAccepted,
  UserDeleted,
  UserExport,
  UserList,
  UserRunList,
  VectorStats,
  WorkerInfo,
  WebhookCreated,
  WebhookList,
  WebhookPublic,
  WebhookOps,
  PingResult,
  EventPage,
} from "./models.js";

export const JOB_FINISHED: ReadonlySet<string> = new Set(["done", "skipped", "failed", "dropped"]);
export const RUN_FINISHED: ReadonlySet<string> = new Set(["done", "cannot_fit", "partial", "stale", "failed"]);
export const REPLAY_FINISHED: ReadonlySet<string> = new Set(["cancelled", "done"]);

/** How long a waitFor* asks, and how often. */
export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
}

export interface MemoryFilters {
  types?: FactType[];
  includeSuperseded?: boolean;
  /** true: only facts held back by the injection guard. */
  quarantined?: boolean;
}

export interface ChatOptions {
  userId: string;
  sessionId: string;
  message: Message;
  model?: string;
  budgetTokens?: number;
  temperature?: number;
  maxTokens?: number;
}

export interface CompressionSettings {
  enabled?: boolean;
  contextLimitTokens?: number;
  triggerRatio?: number;
  targetRatio?: number;
  currentShare?: number;
  topicsShare?: number;
  bulksShare?: number;
  pinHead?: boolean;
}

type Time = Date | string;

function iso(value: Time | undefined): string | undefined {
  return value instanceof Date ? value.toISOString() : value;
}

function memoryQuery(filters: MemoryFilters): {
  type: FactType[] | undefined;
  include_superseded: boolean | undefined;
  quarantined: boolean | undefined;
} {
  return {
    type: filters.types,
    include_superseded: filters.includeSuperseded || undefined,
    quarantined: filters.quarantined,
  };
}

export class Client {
  private readonly http: Transport;

  /** `new Client("http://127.0.0.1:8000", "dev-app-key", { timeoutMs, retry, headers, fetch })`.
   * Errors are TiermemError subclasses; 429, 503 and failed connections are retried as
   * `retry` says. */
  constructor(baseUrl: string, apiKey: string, options: ClientOptions = {}) {
    this.http = new Transport(baseUrl, apiKey, options);
  }

  // -- turns and jobs -------------------------------------------------------------------

  /** Store one exchange and queue its extraction (202). Give the messages `external_id`s
   * to make re-sending safe: a stored turn comes back `duplicate`. */
  storeTurn(
    sessionId: string,
    turn: { userId: string; userMessage: Message; assistantMessage?: Message; createdAt?: Time },
  ): Promise<TurnAccepted> {
    return this.http.send("post", "/v1/sessions/{session_id}/turns", {
      path: { session_id: sessionId },
      body: {
        user_id: turn.userId,
        user_message: turn.userMessage,
        assistant_message: turn.assistantMessage,
        created_at: iso(turn.createdAt),
      },
    });
  }

  /** Transcript lines (≤1000 a call), as `tiermem import FILE.jsonl` reads them. */
  importMessages(messages: TranscriptLine[]): Promise<ImportAccepted> {
    return this.http.send("post", "/v1/import", { body: { messages } });
  }

  getJob(jobId: string): Promise<JobPublic> {
    return this.http.send("get", "/v1/jobs/{job_id}", { path: { job_id: jobId } });
  }

  /** The job once `done`, `skipped`, `failed` or `dropped` (returned, not thrown: read
   * `status` and `error`); WaitTimedOut after `timeoutMs` (default 60 s). */
  waitForJob(jobId: string, { timeoutMs = 60_000, intervalMs = 250 }: WaitOptions = {}): Promise<JobPublic> {
    return until(() => this.getJob(jobId), JOB_FINISHED, timeoutMs, intervalMs, `job ${jobId}`);
  }

  // -- memories ---------------------------------------------------------------------------

  /** One page (`data`) and the `count` of all that match. */
  listMemories(
    userId: string,
    options: MemoryFilters & { limit?: number; offset?: number } = {},
  ): Promise<MemoriesPublic> {
    return this.http.send("get", "/v1/users/{user_id}/memories", {
      path: { user_id: userId },
      query: { ...memoryQuery(options), limit: options.limit ?? 100, offset: options.offset ?? 0 },
    });
  }

  /** Every matching memory, asking `pageSize` at a time (`for await (const m of …)`). */
  async *iterMemories(
    userId: string,
    options: MemoryFilters & { pageSize?: number } = {},
  ): AsyncGenerator<MemoryPublic, void, undefined> {
    const limit = options.pageSize ?? 100;
    for (let offset = 0; ; ) {
      const { data } = await this.listMemories(userId, { ...options, limit, offset });
      yield* data;
      if (data.length < limit) return;
      offset += data.length;
    }
  }

  getMemory(userId: string, memoryId: string): Promise<MemoryPublic> {
    return this.http.send("get", "/v1/users/{user_id}/memories/{memory_id}", {
      path: { user_id: userId, memory_id: memoryId },
    });
  }

  /** Memories by meaning, each with its cosine `score`, best first. */
  searchMemories(
    userId: string,
    query: string,
    options: { k?: number; types?: FactType[]; minScore?: number } = {},
  ): Promise<MemoriesPublic> {
    return this.http.send("post", "/v1/users/{user_id}/memories/search", {
      path: { user_id: userId },
      body: { query, k: options.k ?? 10, types: options.types ?? [], min_score: options.minScore },
    });
  }

  async deleteMemory(userId: string, memoryId: string): Promise<void> {
    await this.http.send("delete", "/v1/users/{user_id}/memories/{memory_id}", {
      path: { user_id: userId, memory_id: memoryId },
    });
  }

  /** Earlier messages from any of the user's sessions, by words and meaning. */
  searchHistory(
    userId: string,
    q: string,
    options: { k?: number; excludeSessionId?: string; around?: number } = {},
  ): Promise<MessageHitsPublic> {
    return this.http.send("get", "/v1/users/{user_id}/history/search", {
      path: { user_id: userId },
      query: { q, k: options.k ?? 10, exclude_session_id: options.excludeSessionId, around: options.around ?? 0 },
    });
  }

  /** Per slot (employer, location, a pet), every value it held, when each began and ended,
   * and the fact and message that superseded or ended it. */
  getBeliefs(userId: string): Promise<BeliefTimeline> {
    return this.http.send("get", "/v1/users/{user_id}/beliefs", { path: { user_id: userId } });
  }

  // -- users, their sessions and runs ---------------------------------------------------

  /** The key's tenant's users, most recently active first; `q`: ids containing it. */
  listUsers(options: { q?: string; limit?: number; offset?: number } = {}): Promise<UserList> {
    return this.http.send("get", "/v1/users", {
      query: { q: options.q, limit: options.limit ?? 50, offset: options.offset ?? 0 },
    });
  }

  listSessions(userId: string, options: { limit?: number; offset?: number } = {}): Promise<SessionList> {
    return this.http.send("get", "/v1/users/{user_id}/sessions", {
      path: { user_id: userId },
      query: { limit: options.limit ?? 50, offset: options.offset ?? 0 },
    });
  }

  /** The user's extraction runs, newest first; `status`: only these (e.g. failed). */
  listRuns(
    userId: string,
    options: { status?: RunStatus[]; limit?: number; offset?: number } = {},
  ): Promise<UserRunList> {
    return this.http.send("get", "/v1/users/{user_id}/runs", {
      path: { user_id: userId },
      query: { status: options.status, limit: options.limit ?? 50, offset: options.offset ?? 0 },
    });
  }

  exportUser(userId: string): Promise<UserExport> {
    return this.http.send("get", "/v1/users/{user_id}/export", { path: { user_id: userId } });
  }

  /** Every row and vector of the user; nothing of theirs is searchable afterwards. */
  deleteUser(userId: string): Promise<UserDeleted> {
    return this.http.send("delete", "/v1/users/{user_id}", { path: { user_id: userId } });
  }

  // -- context and chat ---------------------------------------------------------------

  /** What to put in front of the model before the next message, within the budget.
   * `userId` is needed only before the session's first turn. */
  getContext(
    sessionId: string,
    options: { query?: string; budgetTokens?: number; userId?: string } = {},
  ): Promise<ContextPublic> {
    return this.http.send("get", "/v1/sessions/{session_id}/context", {
      path: { session_id: sessionId },
      query: { query: options.query, budget_tokens: options.budgetTokens, user_id: options.userId },
    });
  }

  /** One memory-augmented turn: context, chat model, reply; the turn is stored. */
  chat(options: ChatOptions): Promise<ChatPublic> {
    return this.http.send("post", "/v1/chat", { body: chatBody(options, false) });
  }

  /** `chat` as the reply is written: `for await (const delta of stream)`; then
   * `stream.result` holds the stored turn's ids and usage. Not retried. */
  chatStream(options: ChatOptions): ChatStream {
    return new ChatStream(() => this.http.open("post", "/v1/chat", { body: chatBody(options, true) }));
  }

  // -- sessions: messages, tiers, compression, continuation -----------------------------------

  /** A page of the session's stored messages (`seq` order; `newestFirst` from the end) and
   * their `count`. NotFound before the session's first message. */
  listMessages(
    sessionId: string,
    options: { limit?: number; offset?: number; newestFirst?: boolean } = {},
  ): Promise<SessionMessagesPublic> {
    return this.http.send("get", "/v1/sessions/{session_id}/messages", {
      path: { session_id: sessionId },
      query: {
        limit: options.limit ?? 100,
        offset: options.offset ?? 0,
        newest_first: options.newestFirst || undefined,
      },
    });
  }

  getTiers(sessionId: string): Promise<TiersPublic> {
    return this.http.send("get", "/v1/sessions/{session_id}/tiers", { path: { session_id: sessionId } });
  }

  /** Run the compression loop now (202); follow it with waitForCompressionRun. */
  compact(sessionId: string, options: { focus?: string } = {}): Promise<CompressionRunPublic> {
    return this.http.send("post", "/v1/sessions/{session_id}/compact", {
      path: { session_id: sessionId },
      body: { focus: options.focus },
    });
  }

  listCompressionRuns(
    sessionId: string,
    options: { limit?: number; offset?: number } = {},
  ): Promise<CompressionRunList> {
    return this.http.send("get", "/v1/sessions/{session_id}/compression/runs", {
      path: { session_id: sessionId },
      query: { limit: options.limit ?? 50, offset: options.offset ?? 0 },
    });
  }

  getCompressionRun(sessionId: string, runId: string): Promise<CompressionRunPublic> {
    return this.http.send("get", "/v1/sessions/{session_id}/compression/runs/{run_id}", {
      path: { session_id: sessionId, run_id: runId },
    });
  }

  waitForCompressionRun(
    sessionId: string,
    runId: string,
    { timeoutMs = 120_000, intervalMs = 500 }: WaitOptions = {},
  ): Promise<CompressionRunPublic> {
    const ask = (): Promise<CompressionRunPublic> => this.getCompressionRun(sessionId, runId);
    return until(ask, RUN_FINISHED, timeoutMs, intervalMs, `compression run ${runId}`);
  }

  getCompressionSettings(sessionId: string): Promise<CompressionSettingsPublic> {
    return this.http.send("get", "/v1/sessions/{session_id}/compression", { path: { session_id: sessionId } });
  }

  /** Replace the session's overrides (what is left out comes from the deployment). */
  setCompressionSettings(sessionId: string, settings: CompressionSettings): Promise<CompressionSettingsPublic> {
    return this.http.send("put", "/v1/sessions/{session_id}/compression", {
      path: { session_id: sessionId },
      body: {
        enabled: settings.enabled,
        context_limit_tokens: settings.contextLimitTokens,
        trigger_ratio: settings.triggerRatio,
        target_ratio: settings.targetRatio,
        current_share: settings.currentShare,
        topics_share: settings.topicsShare,
        bulks_share: settings.bulksShare,
        pin_head: settings.pinHead,
      },
    });
  }

  /** A child session seeded with this one's tiers (201). */
  continueSession(sessionId: string, options: { newSessionId?: string } = {}): Promise<ContinuePublic> {
    return this.http.send("post", "/v1/sessions/{session_id}/continue", {
      path: { session_id: sessionId },
      body: { session_id: options.newSessionId },
    });
  }

  // -- admin: tenants and keys ----------------------------------------------------------

  /** Operator key: a tenant and its first app key (shown once). */
  createTenant(name: string): Promise<TenantCreated> {
    return this.http.send("post", "/v1/admin/tenants", { body: { name } });
  }

  listTenants(): Promise<TenantPublic[]> {
    return this.http.send("get", "/v1/admin/tenants");
  }

  createKey(tenantId: string, options: { name?: string; scope?: "app" | "admin" } = {}): Promise<KeyCreated> {
    return this.http.send("post", "/v1/admin/tenants/{tenant_id}/keys", {
      path: { tenant_id: tenantId },
      body: { name: options.name ?? "", scope: options.scope ?? "app" },
    });
  }

  // -- admin: ops ----------------------------------------------------------------------

  opsQueues(options: { failedLimit?: number } = {}): Promise<OpsSnapshot> {
    return this.http.send("get", "/v1/ops/queues", { query: { failed_limit: options.failedLimit ?? 20 } });
  }

  opsWorkers(): Promise<WorkerInfo[]> {
    return this.http.send("get", "/v1/ops/workers");
  }

  opsTimeseries(options: { minutes?: number } = {}): Promise<Series> {
    return this.http.send("get", "/v1/ops/timeseries", { query: { minutes: options.minutes ?? 60 } });
  }

  opsVectors(): Promise<VectorStats> {
    return this.http.send("get", "/v1/ops/vectors");
  }

  /** Failed extraction runs back to pending (without runIds: every failed one). */
  retryRuns(options: { runIds?: string[]; tenantId?: string } = {}): Promise<RetryOut> {
    return this.http.send("post", "/v1/ops/runs/retry", {
      body: { run_ids: options.runIds, tenant_id: options.tenantId },
    });
  }

  pauseQueue(queue: string): Promise<QueueState> {
    return this.http.send("post", "/v1/ops/queues/{queue}/pause", { path: { queue } });
  }

  resumeQueue(queue: string): Promise<QueueState> {
    return this.http.send("post", "/v1/ops/queues/{queue}/resume", { path: { queue } });
  }

  // -- webhooks and the events feed -----------------------------------------------------

  /** Admin key: a subscription; its `secret` (generated unless given) is shown once. */
  createWebhook(
    url: string,
    events: string[],
    options: { secret?: string; description?: string; tenantId?: string } = {},
  ): Promise<WebhookCreated> {
    return this.http.send("post", "/v1/webhooks", {
      body: {
        url,
        events,
        secret: options.secret,
        description: options.description ?? "",
        tenant_id: options.tenantId,
      },
    });
  }

  listWebhooks(): Promise<WebhookList> {
    return this.http.send("get", "/v1/webhooks");
  }

  getWebhook(webhookId: string): Promise<WebhookPublic> {
    return this.http.send("get", "/v1/webhooks/{webhook_id}", { path: { webhook_id: webhookId } });
  }

  /** Only what is given changes; `enabled: true` also resumes one disabled by failure. */
  updateWebhook(
    webhookId: string,
    change: { url?: string; events?: string[]; description?: string; enabled?: boolean; secret?: string },
  ): Promise<WebhookPublic> {
    return this.http.send("patch", "/v1/webhooks/{webhook_id}", {
      path: { webhook_id: webhookId },
      body: change,
    });
  }

  async deleteWebhook(webhookId: string): Promise<void> {
    await this.http.send("delete", "/v1/webhooks/{webhook_id}", { path: { webhook_id: webhookId } });
  }

  /** A signed `webhook.test` event sent now; what the receiver answered. */
  testWebhook(webhookId: string): Promise<PingResult> {
    return this.http.send("post", "/v1/webhooks/{webhook_id}/test", { path: { webhook_id: webhookId } });
  }

  /** The tenant's events after the cursor `after`, in order; read on from `next_cursor`. */
  events(options: { after?: number; limit?: number } = {}): Promise<EventPage> {
    return this.http.send("get", "/v1/events", {
      query: { after: options.after ?? 0, limit: options.limit ?? 100 },
    });
  }

  opsWebhooks(options: { failedLimit?: number } = {}): Promise<WebhookOps> {
    return this.http.send("get", "/v1/ops/webhooks", { query: { failed_limit: options.failedLimit ?? 20 } });
  }

  // -- admin: replay ---------------------------------------------------------------------

  /** Re-run extraction over stored turns (202); follow it with waitForReplay. */
  startReplay(options: {
    mode: "dry_run" | "apply" | "rebuild";
    tenantId?: string;
    userIds?: string[];
    sessionIds?: string[];
    since?: Time;
    until?: Time;
    staleOnly?: boolean;
  }): Promise<ReplayProgress> {
    return this.http.send("post", "/v1/replay", {
      body: {
        mode: options.mode,
        tenant_id: options.tenantId,
        user_ids: options.userIds,
        session_ids: options.sessionIds,
        since: iso(options.since),
        until: iso(options.until),
        stale_only: options.staleOnly || undefined,
      },
    });
  }

  listReplays(): Promise<ReplayProgress[]> {
    return this.http.send("get", "/v1/replay");
  }

  getReplay(jobId: string): Promise<ReplayProgress> {
    return this.http.send("get", "/v1/replay/{job_id}", { path: { job_id: jobId } });
  }

  waitForReplay(jobId: string, { timeoutMs = 600_000, intervalMs = 1000 }: WaitOptions = {}): Promise<ReplayProgress> {
    return until(() => this.getReplay(jobId), REPLAY_FINISHED, timeoutMs, intervalMs, `replay ${jobId}`);
  }

  cancelReplay(jobId: string): Promise<ReplayProgress> {
    return this.http.send("post", "/v1/replay/{job_id}/cancel", { path: { job_id: jobId } });
  }

  resumeReplay(jobId: string): Promise<ReplayProgress> {
    return this.http.send("post", "/v1/replay/{job_id}/resume", { path: { job_id: jobId } });
  }
}

function chatBody(options: ChatOptions, stream: boolean): {
  user_id: string;
  session_id: string;
  message: Message;
  model: string | undefined;
  budget_tokens: number | undefined;
  temperature: number | undefined;
  max_tokens: number | undefined;
  stream: boolean;
} {
  return {
    user_id: options.userId,
    session_id: options.sessionId,
    message: options.message,
    model: options.model,
    budget_tokens: options.budgetTokens,
    temperature: options.temperature,
    max_tokens: options.maxTokens,
    stream,
  };
}

/** Ask `ask` every `intervalMs` until its status is one of `finished`, for at most `timeoutMs`. */
async function until<T extends { status: string }>(
  ask: () => Promise<T>,
  finished: ReadonlySet<string>,
  timeoutMs: number,
  intervalMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await ask();
    if (finished.has(value.status)) return value;
    if (Date.now() >= deadline) {
      throw new WaitTimedOut(`${what} did not finish within ${timeoutMs / 1000}s`, {
        code: "wait_timeout",
        details: { last: value },
      });
    }
    await sleep(Math.min(intervalMs, Math.max(0, deadline - Date.now())));
  }
}
