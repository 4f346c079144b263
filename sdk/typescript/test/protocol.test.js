// Retries, typed errors and the chat stream over real HTTP: a tiny server on 127.0.0.1
// answers what each test scripts (503 with Retry-After, 429, 404, a dropped connection, a
// proxy's page, an event stream), then the client's attempts and waits are measured. The
// API itself cannot be made to answer 503 on cue; the protocol is the point.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, beforeEach, describe, test } from "node:test";

import {
  Client,
  ConnectionFailed,
  NO_RETRIES,
  NotFound,
  parseRetryAfter,
  RateLimited,
  RetryPolicy,
  ServerError,
  TiermemError,
  Unavailable,
  UpstreamError,
  WaitTimedOut,
} from "../dist/index.js";

const JOB = { id: "j1", status: "done", attempts: 1, error: null, facts_added: 1 };
const FAST = new RetryPolicy({ maxAttempts: 4, backoffMs: 10, maxBackoffMs: 50 });

/** Answers the scripted steps in turn, then 200 with JOB; records when each request came. */
class Scripted {
  script = [];
  seen = [];

  handle(request, response) {
    let body = "";
    request.on("data", (piece) => (body += piece));
    request.on("end", () => {
      this.seen.push({ at: Date.now(), method: request.method, url: request.url, headers: request.headers, body });
      const step = this.script.shift() ?? { status: 200 };
      if (step.status === 0) {
        request.socket.destroy(); // drop the connection without an answer
        return;
      }
      // A connection per request: Deno's fetch sends a request again by itself when a
      // pooled connection turns out closed, which would hide what the client decided.
      response.setHeader("Connection", "close");
      if (step.events) {
        response.writeHead(200, { "Content-Type": "text/event-stream" });
        for (const event of step.events) response.write(`data: ${JSON.stringify(event)}\n\n`);
        response.end();
        return;
      }
      const error = { error: { code: `status_${step.status}`, message: "scripted", details: { n: 1 } } };
      const text = step.raw ?? JSON.stringify(step.status === 200 ? (step.json ?? JOB) : error);
      response.writeHead(step.status, { "Content-Type": "application/json", ...step.headers });
      response.end(text);
    });
  }
}

describe("against a scripted server", () => {
  const scripted = new Scripted();
  const server = createServer((request, response) => scripted.handle(request, response));
  let url;

  before(async () => {
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${server.address().port}`;
  });
  after(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  beforeEach(() => {
    scripted.script = [];
    scripted.seen = [];
  });

  const client = (options = {}) => new Client(url, "k", { retry: FAST, ...options });

  test("503 with Retry-After is retried after at least that long", async () => {
    scripted.script = [{ status: 503, headers: { "Retry-After": "1" } }];
    const job = await client().getJob("j1");
    assert.equal(job.id, "j1");
    assert.equal(scripted.seen.length, 2);
    const waited = scripted.seen[1].at - scripted.seen[0].at;
    assert.ok(waited >= 950 && waited < 3000, `waited ${waited} ms`);
  });

  test("429 is retried until the attempts run out, then thrown as RateLimited", async () => {
    scripted.script = Array(4).fill({ status: 429 });
    const error = await client().getJob("j1").catch((e) => e);
    assert.ok(error instanceof RateLimited && error instanceof TiermemError, String(error));
    assert.equal(error.status, 429);
    assert.equal(error.code, "status_429");
    assert.deepEqual(error.details, { n: 1 });
    assert.equal(scripted.seen.length, 4);
  });

  test("a POST is retried on 503 too (it was refused, not stored)", async () => {
    scripted.script = [{ status: 503 }, { status: 503 }];
    await client().storeTurn("s1", { userId: "u", userMessage: "hi" });
    assert.equal(scripted.seen.length, 3);
    assert.ok(scripted.seen.every((r) => r.method === "POST"));
  });

  test("a Retry-After above the limit is thrown at once with retryAfterMs", async () => {
    scripted.script = [{ status: 503, headers: { "Retry-After": "120" } }];
    const error = await client().getJob("j1").catch((e) => e);
    assert.ok(error instanceof Unavailable && error instanceof ServerError, String(error));
    assert.equal(error.retryAfterMs, 120_000);
    assert.equal(scripted.seen.length, 1);
  });

  test("other 4xx are never retried", async () => {
    scripted.script = [{ status: 404 }];
    await assert.rejects(client().getJob("j1"), NotFound);
    assert.equal(scripted.seen.length, 1);
  });

  test("NO_RETRIES sends once", async () => {
    scripted.script = [{ status: 503 }];
    await assert.rejects(client({ retry: NO_RETRIES }).getJob("j1"), Unavailable);
    assert.equal(scripted.seen.length, 1);
  });

  test("a dropped connection is retried for a GET, not for a POST", async () => {
    scripted.script = [{ status: 0 }];
    assert.equal((await client().getJob("j1")).id, "j1");
    assert.equal(scripted.seen.length, 2);

    scripted.seen = [];
    scripted.script = [{ status: 0 }];
    const error = await client()
      .storeTurn("s1", { userId: "u", userMessage: "hi" })
      .catch((e) => e);
    assert.ok(error instanceof ConnectionFailed, String(error));
    assert.equal(error.status, null);
    assert.equal(error.code, "connection_failed");
    assert.equal(scripted.seen.length, 1);
  });

  test("a refused connection is retried whatever the method, then ConnectionFailed", async () => {
    const closed = createServer();
    await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = closed.address().port;
    await new Promise((resolve) => closed.close(resolve));
    let attempts = 0;
    const counting = (input, init) => {
      attempts++;
      return fetch(input, init);
    };
    const error = await new Client(`http://127.0.0.1:${port}`, "k", { retry: FAST, fetch: counting })
      .storeTurn("s1", { userId: "u", userMessage: "hi" })
      .catch((e) => e);
    assert.ok(error instanceof ConnectionFailed, String(error));
    assert.equal(attempts, 4);
    assert.equal(error.details.attempts, 4);
  });

  test("an answer slower than timeoutMs is a ConnectionFailed", async () => {
    const slow = createServer((_, response) => setTimeout(() => response.end("{}"), 2000));
    await new Promise((resolve) => slow.listen(0, "127.0.0.1", resolve));
    try {
      const tm = new Client(`http://127.0.0.1:${slow.address().port}`, "k", { timeoutMs: 200, retry: NO_RETRIES });
      const started = Date.now();
      const error = await tm.getJob("j1").catch((e) => e);
      assert.ok(error instanceof ConnectionFailed, String(error));
      assert.match(error.message, /no answer within 200 ms/);
      assert.ok(Date.now() - started < 1500);
    } finally {
      slow.closeAllConnections();
      await new Promise((resolve) => slow.close(resolve));
    }
  });

  test("a proxy's page keeps its status's class, with code http_<status>", async () => {
    scripted.script = [{ status: 502, raw: "<html>Bad Gateway</html>", headers: { "Content-Type": "text/html" } }];
    const error = await client().getJob("j1").catch((e) => e);
    assert.ok(error instanceof UpstreamError, String(error));
    assert.equal(error.code, "http_502");
    assert.equal(error.message, "<html>Bad Gateway</html>");
  });

  test("requests carry the key, the JSON body and the query as the API reads them", async () => {
    scripted.script = [{ status: 200, json: { data: [], count: 0 } }];
    await client({ headers: { "X-Trace": "t1" } }).listMemories("a/b c", {
      types: ["identity", "goal"],
      includeSuperseded: true,
      limit: 5,
    });
    scripted.script = [{ status: 200, json: JOB }];
    await client().storeTurn("s 1", {
      userId: "u",
      userMessage: { content: "hi", external_id: "m1" },
      createdAt: new Date("2026-01-02T03:04:05Z"),
    });
    const [list, store] = scripted.seen;
    assert.equal(list.url, "/v1/users/a%2Fb%20c/memories?type=identity&type=goal&include_superseded=true&limit=5&offset=0");
    assert.equal(list.headers.authorization, "Bearer k");
    assert.equal(list.headers["x-trace"], "t1");
    assert.match(list.headers["user-agent"], /^tiermem-typescript\//);
    assert.equal(store.url, "/v1/sessions/s%201/turns");
    assert.equal(store.headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(store.body), {
      user_id: "u",
      user_message: { content: "hi", external_id: "m1" },
      created_at: "2026-01-02T03:04:05.000Z",
    });
  });

  test("waitForJob returns at once on every finished state, dropped included", async () => {
    for (const status of ["done", "skipped", "failed", "dropped"]) {
      scripted.seen = [];
      scripted.script = [{ status: 200, json: { ...JOB, status: "pending" } }, { status: 200, json: { ...JOB, status } }];
      const job = await client().waitForJob("j1", { intervalMs: 10 });
      assert.equal(job.status, status);
      assert.equal(scripted.seen.length, 2);
    }
  });

  test("waitForJob gives up with WaitTimedOut holding the last state", async () => {
    scripted.script = Array(100).fill({ status: 200, json: { ...JOB, status: "running" } });
    const error = await client().waitForJob("j1", { timeoutMs: 150, intervalMs: 20 }).catch((e) => e);
    assert.ok(error instanceof WaitTimedOut, String(error));
    assert.equal(error.code, "wait_timeout");
    assert.equal(error.details.last.status, "running");
  });

  test("a stream yields its deltas, then the stored turn as result", async () => {
    const done = { done: true, user_id: "u", session_id: "s", message_ids: ["a", "b"], job_id: "j" };
    scripted.script = [{ events: [{ delta: "Hel" }, { delta: "lo" }, done] }];
    const stream = client().chatStream({ userId: "u", sessionId: "s", message: "hi" });
    const deltas = [];
    for await (const delta of stream) deltas.push(delta);
    assert.deepEqual(deltas, ["Hel", "lo"]);
    assert.equal(stream.result.reply, "Hello");
    assert.equal(stream.result.job_id, "j");
    assert.equal("done" in stream.result, false);
    assert.equal(JSON.parse(scripted.seen[0].body).stream, true);
    for await (const _ of stream) assert.fail("a second loop yields nothing");
    assert.equal(scripted.seen.length, 1, "and sends nothing");
  });

  test("an error event in a stream is thrown typed; a failed stream is not retried", async () => {
    const upstream = { error: { code: "upstream_timeout", message: "slow model", details: {} } };
    scripted.script = [{ events: [{ delta: "Hel" }, upstream] }];
    const deltas = [];
    const error = await (async () => {
      for await (const delta of client().chatStream({ userId: "u", sessionId: "s", message: "hi" })) deltas.push(delta);
    })().catch((e) => e);
    assert.ok(error instanceof UpstreamError, String(error));
    assert.equal(error.status, 504);
    assert.deepEqual(deltas, ["Hel"]);

    scripted.seen = [];
    scripted.script = [{ status: 503 }];
    const refused = client().chatStream({ userId: "u", sessionId: "s", message: "hi" });
    await assert.rejects(async () => {
      for await (const _ of refused);
    }, Unavailable);
    assert.equal(scripted.seen.length, 1);
  });
});

test("Retry-After: seconds, an HTTP date, nothing readable", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  assert.equal(parseRetryAfter("7", now), 7000);
  assert.equal(parseRetryAfter("Thu, 01 Jan 2026 00:00:30 GMT", now), 30_000);
  assert.equal(parseRetryAfter("Wed, 31 Dec 2025 23:00:00 GMT", now), 0);
  assert.equal(parseRetryAfter("soon", now), null);
  assert.equal(parseRetryAfter("", now), null);
  assert.equal(parseRetryAfter(null, now), null);
});

test("backoff: full jitter, doubling, capped; never less than Retry-After", () => {
  const policy = new RetryPolicy({ backoffMs: 500, maxBackoffMs: 8000, random: () => 1 });
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((n) => policy.backoff(n)), [500, 1000, 2000, 4000, 8000, 8000]);
  assert.equal(policy.afterAnswer(1, 503, "3"), 3000);
  assert.equal(policy.afterAnswer(1, 503, "61"), null);
  assert.equal(policy.afterAnswer(1, 500, null), null);
  assert.equal(policy.afterAnswer(4, 429, null), null);
  assert.equal(policy.afterError(1, false, "POST"), null);
  assert.equal(policy.afterError(1, true, "POST"), 500);
  assert.equal(policy.afterError(1, false, "delete"), 500);
});
