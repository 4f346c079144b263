/** When to send a request again: 429, 503 and failed connections, with exponential backoff,
 * full jitter and the server's Retry-After; never another 4xx. The Python SDK's rules
 * (`tiermem.retry`), in milliseconds. */

export const RETRY_STATUSES: ReadonlySet<number> = new Set([429, 503]);
export const IDEMPOTENT: ReadonlySet<string> = new Set(["GET", "HEAD", "PUT", "DELETE", "OPTIONS"]);
// Errors that say the request never left (refused, no such host, connect timeout): safe to
// send again whatever the method. Node's fetch (undici) puts the code on the error's cause,
// Bun on the error; Deno says it in the cause's message. Browsers say nothing, so there only
// idempotent requests are retried.
const NOT_SENT_MESSAGE = /client error \(Connect\)/;
const NOT_SENT_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

export interface RetryOptions {
  /** Counts the first attempt (1 = never retry). Default 4. */
  maxAttempts?: number;
  /** The n-th retry waits a random time up to backoffMs × 2ⁿ⁻¹ … Default 500. */
  backoffMs?: number;
  /** … and at most this. Default 8000. */
  maxBackoffMs?: number;
  /** A Retry-After above this is not waited for: the error is thrown with its
   * `retryAfterMs` for the caller to decide. Default 60000. */
  maxRetryAfterMs?: number;
  /** A number in [0, 1); Math.random by default. */
  random?: () => number;
}

/** What went wrong with one attempt, as far as retrying cares. */
export type Outcome =
  | { kind: "answer"; status: number; retryAfter: string | null }
  | { kind: "error"; notSent: boolean };

export class RetryPolicy {
  readonly maxAttempts: number;
  readonly backoffMs: number;
  readonly maxBackoffMs: number;
  readonly maxRetryAfterMs: number;
  readonly random: () => number;

  constructor(options: RetryOptions = {}) {
    this.maxAttempts = options.maxAttempts ?? 4;
    this.backoffMs = options.backoffMs ?? 500;
    this.maxBackoffMs = options.maxBackoffMs ?? 8000;
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 60_000;
    this.random = options.random ?? Math.random;
  }

  /** Milliseconds to wait before attempt `attempt + 1`, or null: this outcome stands. */
  delay(attempt: number, outcome: Outcome, method: string): number | null {
    return outcome.kind === "answer"
      ? this.afterAnswer(attempt, outcome.status, outcome.retryAfter)
      : this.afterError(attempt, outcome.notSent, method);
  }

  backoff(attempt: number): number {
    return this.random() * Math.min(this.maxBackoffMs, this.backoffMs * 2 ** (attempt - 1));
  }

  afterAnswer(attempt: number, status: number, retryAfterHeader: string | null): number | null {
    if (!RETRY_STATUSES.has(status) || attempt >= this.maxAttempts) return null;
    const retryAfter = parseRetryAfter(retryAfterHeader);
    if (retryAfter === null) return this.backoff(attempt);
    if (retryAfter > this.maxRetryAfterMs) return null;
    return Math.max(retryAfter, this.backoff(attempt));
  }

  /** A connection that failed before sending is always retried; one cut after the request
   * went out only for a method that may be sent twice. */
  afterError(attempt: number, notSent: boolean, method: string): number | null {
    if (attempt >= this.maxAttempts) return null;
    if (notSent || IDEMPOTENT.has(method.toUpperCase())) return this.backoff(attempt);
    return null;
  }
}

export const NO_RETRIES = new RetryPolicy({ maxAttempts: 1 });

/** Whether a failed fetch surely never sent the request. */
export function notSent(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 4; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && NOT_SENT_CODES.has(code)) return true;
    if (e instanceof Error && NOT_SENT_MESSAGE.test(e.message)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** Retry-After as delta-seconds or an HTTP date (RFC 9110 §10.2.3), in milliseconds; null if
 * absent or unreadable. A date in the past is 0. */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | null {
  const text = value?.trim();
  if (!text) return null;
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // An HTTP date names its weekday and zone; Date.parse reads those (IMF-fixdate, RFC 850,
  // asctime) but also looser text, which is refused here.
  if (!/[a-z]{3}/i.test(text)) return null;
  const when = Date.parse(/GMT|UTC|[+-]\d{4}$/.test(text) ? text : `${text} GMT`);
  return Number.isNaN(when) ? null : Math.max(0, when - now);
}
