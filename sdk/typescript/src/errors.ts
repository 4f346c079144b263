/** Typed errors built from the API's error body `{"error": {code, message, details}}`; the
 * same classes, by the same statuses, as the Python SDK's `tiermem.errors`. */

export interface ErrorFields {
  code: string;
  status?: number | null;
  details?: Record<string, unknown> | null;
  retryAfterMs?: number | null;
  cause?: unknown;
}

/** Every error the client throws: the API's stable `code`, its `message` for people, its
 * `details`, the HTTP `status` (null when no answer came) and `retryAfterMs` when the server
 * named a Retry-After. */
export class TiermemError extends Error {
  readonly code: string;
  readonly status: number | null;
  readonly details: Record<string, unknown>;
  readonly retryAfterMs: number | null;

  constructor(message: string, fields: ErrorFields) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = new.target.name;
    this.code = fields.code;
    this.status = fields.status ?? null;
    this.details = fields.details ?? {};
    this.retryAfterMs = fields.retryAfterMs ?? null;
  }

  override toString(): string {
    const where = this.status === null ? "" : `${this.status} `;
    return `${this.name}: ${where}${this.code}: ${this.message}`;
  }
}

/** 400: the body is not JSON the API can read (`malformed_json`). */
export class BadRequest extends TiermemError {}
/** 401: no key, or an unknown or revoked one. */
export class Unauthorized extends TiermemError {}
/** 403: the key cannot reach this. */
export class Forbidden extends TiermemError {}
/** 404: no such user, session, job, memory or replay in the key's tenant. */
export class NotFound extends TiermemError {}
/** 409: the state does not allow it now. */
export class Conflict extends TiermemError {}
/** 422: `details.errors` lists each field and rule. */
export class ValidationFailed extends TiermemError {}
/** 429, after the retries the policy allows. */
export class RateLimited extends TiermemError {}
/** 5xx. */
export class ServerError extends TiermemError {}
/** 502/504 from /v1/chat: the chat model failed or timed out; the message is stored. */
export class UpstreamError extends ServerError {}
/** 503, after the retries the policy allows: send it again later. */
export class Unavailable extends ServerError {}
/** No answer: the connection failed, was cut or timed out, after the retries the policy allows. */
export class ConnectionFailed extends TiermemError {}
/** A waitFor* gave up before the job or run finished; `details.last` has its last state. */
export class WaitTimedOut extends TiermemError {}

type ErrorClass = new (message: string, fields: ErrorFields) => TiermemError;

const BY_STATUS: Record<number, ErrorClass> = {
  400: BadRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  422: ValidationFailed,
  429: RateLimited,
  502: UpstreamError,
  503: Unavailable,
  504: UpstreamError,
};

export function errorClass(status: number): ErrorClass {
  return BY_STATUS[status] ?? (status >= 500 ? ServerError : TiermemError);
}

/** The typed error of an answer ≥ 400; a body not in the API's shape (a proxy's page) still
 * gives an error of the status's class, with code `http_<status>`. */
export function fromAnswer(
  status: number,
  statusText: string,
  text: string,
  retryAfterMs: number | null,
): TiermemError {
  let code = `http_${status}`;
  let message = statusText || "error";
  let details: Record<string, unknown> = {};
  const error = parseErrorBody(text);
  if (error) {
    ({ code, message } = error);
    details = error.details;
  } else if (text) {
    message = text.slice(0, 500);
  }
  return new (errorClass(status))(message, { code, status, details, retryAfterMs });
}

/** An error event inside a stream (the answer itself was 200). */
export function fromEvent(error: Record<string, unknown>): TiermemError {
  const code = String(error["code"] ?? "error");
  const status = code === "upstream_error" ? 502 : code === "upstream_timeout" ? 504 : null;
  const kind = status === null ? TiermemError : errorClass(status);
  const details = isRecord(error["details"]) ? error["details"] : {};
  return new kind(String(error["message"] ?? ""), { code, status, details });
}

function parseErrorBody(
  text: string,
): { code: string; message: string; details: Record<string, unknown> } | null {
  try {
    const body: unknown = JSON.parse(text);
    const error = isRecord(body) ? body["error"] : undefined;
    if (!isRecord(error) || !("code" in error) || !("message" in error)) return null;
    const details = isRecord(error["details"]) ? error["details"] : {};
    return { code: String(error["code"]), message: String(error["message"]), details };
  } catch {
    return null;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
