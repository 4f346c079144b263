/** Sending: one request with retries, timeouts and typed errors over the platform's `fetch`,
 * typed by the OpenAPI document (src/schema.ts), so a route, parameter or field the server
 * no longer has fails to compile here. */

import { ConnectionFailed, fromAnswer, TiermemError } from "./errors.js";
import { notSent, RetryPolicy, parseRetryAfter, type Outcome } from "./retry.js";
import type { paths } from "./schema.js";

export const VERSION = "0.1.0";
export const DEFAULT_TIMEOUT_MS = 30_000;

export type Fetch = (input: string, init: RequestInit) => Promise<Response>;

export interface ClientOptions {
  /** Each attempt's limit, from sending to the last byte (for a stream: until the answer
   * starts, then between two pieces). Default 30000. */
  timeoutMs?: number;
  /** A RetryPolicy, or its options (`{ maxAttempts: 1 }`, or NO_RETRIES, turns retries off). */
  retry?: RetryPolicy | ConstructorParameters<typeof RetryPolicy>[0];
  /** Sent with every request (after the client's own). */
  headers?: Record<string, string>;
  /** The `fetch` to send with; the platform's global one by default. */
  fetch?: Fetch;
}

export type Method = "get" | "post" | "put" | "patch" | "delete";
export type Route = keyof paths;
type Operation<P extends Route, M extends Method> = NonNullable<paths[P][M]>;
type PathOf<O> = O extends { parameters: { path: infer X } } ? X : never;
type QueryOf<O> = O extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;
type BodyOf<O> = O extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;
type Json<R> = R extends { content: { "application/json": infer T } } ? T : undefined;
type AnswerOf<O> = O extends { responses: infer R }
  ? R extends { 200: infer A } ? Json<A>
    : R extends { 201: infer A } ? Json<A>
    : R extends { 202: infer A } ? Json<A>
    : undefined
  : never;
// The API fills in what a request leaves out, so every field of a body may be left out here.
type Loose<T> = { [K in keyof T]?: T[K] | undefined };

export interface Parts<P extends Route, M extends Method> {
  path?: PathOf<Operation<P, M>>;
  query?: Loose<QueryOf<Operation<P, M>>>;
  body?: Loose<BodyOf<Operation<P, M>>>;
}

export type Answer<P extends Route, M extends Method> = AnswerOf<Operation<P, M>>;

export class Transport {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  readonly timeoutMs: number;
  private readonly headers: Record<string, string>;
  private readonly fetch: Fetch;

  constructor(baseUrl: string, apiKey: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.retry = options.retry instanceof RetryPolicy ? options.retry : new RetryPolicy(options.retry);
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.headers = {
      Authorization: `Bearer ${apiKey}`,
      Accept: "application/json",
      "User-Agent": `tiermem-typescript/${VERSION}`,
      ...options.headers,
    };
    const platform = globalThis.fetch as Fetch | undefined;
    if (options.fetch) this.fetch = options.fetch;
    // Called on globalThis: browsers refuse a `fetch` called on another object ("Illegal invocation").
    else if (platform) this.fetch = (input, init) => platform.call(globalThis, input, init);
    else throw new TypeError("no global fetch (Node >= 18 has one): pass options.fetch");
  }

  /** One call, sent again as the retry policy says; its JSON answer, or its typed error. */
  async send<P extends Route, M extends Method>(
    method: M,
    route: P,
    parts: Parts<P, M> = {},
  ): Promise<Answer<P, M>> {
    const { url, init } = this.request(method, route, parts);
    const verb = init.method as string;
    for (let attempt = 1; ; attempt++) {
      const timer = new Deadline(this.timeoutMs);
      let outcome: Outcome;
      let text = "";
      let response: Response | undefined;
      let failure: unknown;
      try {
        response = await this.fetch(url, { ...init, signal: timer.signal });
        text = await response.text();
        outcome = { kind: "answer", status: response.status, retryAfter: response.headers.get("Retry-After") };
      } catch (error) {
        failure = timer.expired ? timer.error() : error;
        outcome = { kind: "error", notSent: notSent(error) };
      } finally {
        timer.clear();
      }
      const delay = this.retry.delay(attempt, outcome, verb);
      if (delay !== null) {
        await sleep(delay);
        continue;
      }
      if (response === undefined) throw connectionFailed(verb, route, failure, attempt);
      if (response.status >= 400) throw answerError(response, text);
      return readJson(text, response.status) as Answer<P, M>;
    }
  }

  /** An answer to read as it comes (not retried: a stream that failed midway may have
   * stored the user's message already); its body, and a timer to re-arm per piece. */
  async open<P extends Route, M extends Method>(
    method: M,
    route: P,
    parts: Parts<P, M>,
  ): Promise<{ body: ReadableStream<Uint8Array>; timer: Deadline }> {
    const { url, init } = this.request(method, route, parts);
    const timer = new Deadline(this.timeoutMs);
    const verb = init.method as string;
    let response: Response;
    try {
      response = await this.fetch(url, { ...init, signal: timer.signal });
    } catch (error) {
      timer.clear();
      throw connectionFailed(verb, route, timer.expired ? timer.error() : error, 1);
    }
    if (response.status >= 400 || response.body === null) {
      const text = await response.text().catch(() => "");
      timer.clear();
      if (response.status >= 400) throw answerError(response, text);
      throw connectionFailed(verb, route, new Error("the answer has no body"), 1);
    }
    return { body: response.body, timer };
  }

  private request<P extends Route, M extends Method>(
    method: M,
    route: P,
    parts: Parts<P, M>,
  ): { url: string; init: RequestInit } {
    const params = (parts.path ?? {}) as Record<string, string>;
    const path = route.replace(/\{(\w+)\}/g, (_, name: string) => segment(String(params[name])));
    const query = queryString((parts.query ?? {}) as Record<string, unknown>);
    const headers: Record<string, string> = { ...this.headers };
    const init: RequestInit = { method: method.toUpperCase(), headers };
    if (parts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(withoutUnset(parts.body as Record<string, unknown>));
    }
    return { url: `${this.baseUrl}${path}${query}`, init };
  }
}

/** An attempt's time limit: aborts the fetch (or the read) it was given to. */
export class Deadline {
  private readonly controller = new AbortController();
  private handle: ReturnType<typeof setTimeout> | undefined;
  expired = false;

  constructor(private readonly ms: number) {
    this.arm();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  arm(): void {
    this.clear();
    this.handle = setTimeout(() => {
      this.expired = true;
      this.controller.abort();
    }, this.ms);
  }

  clear(): void {
    if (this.handle !== undefined) clearTimeout(this.handle);
    this.handle = undefined;
  }

  error(): Error {
    return new Error(`no answer within ${this.ms} ms`);
  }
}

export function connectionFailed(method: string, route: string, error: unknown, attempts: number): ConnectionFailed {
  const why = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  const code = typeof cause?.code === "string" ? ` (${cause.code})` : "";
  return new ConnectionFailed(`${method} ${route}: ${why}${code}`, {
    code: "connection_failed",
    details: { attempts },
    cause: error,
  });
}

function readJson(text: string, status: number): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    // A 2xx that is not JSON: a proxy's page, or a server at the wrong URL.
    const message = `the answer is not JSON: ${text.slice(0, 200)}`;
    throw new TiermemError(message, { code: "invalid_answer", status });
  }
}

function answerError(response: Response, text: string): Error {
  const retryAfter = parseRetryAfter(response.headers.get("Retry-After"));
  return fromAnswer(response.status, response.statusText, text, retryAfter);
}

/** A path segment: ids are restricted by the API, but never trusted to be URL-safe. */
export function segment(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** Query parameters without the unset ones; an array repeats its name. */
export function queryString(values: Record<string, unknown>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(values)) {
    for (const item of Array.isArray(value) ? value : [value]) {
      if (item !== undefined && item !== null) search.append(name, String(item));
    }
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

function withoutUnset(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined && v !== null));
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
