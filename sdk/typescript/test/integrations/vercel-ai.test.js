// tiermem/ai with the real `ai` package (its MockLanguageModelV3 as the model) against a real
// `tiermem serve` (started by tests/sdk/test_typescript_client.py, which passes its URL and
// key): generateText and streamText see the user's memories in a system message after their
// own, and each exchange is stored as a turn that tiermem extracts. Without TIERMEM_URL these
// tests are skipped.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";

import { generateText, streamText, wrapLanguageModel } from "ai";
import { MockLanguageModelV3, convertArrayToReadableStream } from "ai/test";

import { Client } from "../../dist/index.js";
import { tiermemMiddleware } from "../../dist/integrations/vercel-ai.js";

const url = process.env.TIERMEM_URL;
const appKey = process.env.TIERMEM_APP_KEY ?? "dev-app-key";
const skip = url ? false : "TIERMEM_URL is not set (a running `tiermem serve`)";

const newId = (prefix) => `${prefix}-${randomUUID().slice(0, 8)}`;
const usage = {
  inputTokens: { total: 3, noCache: 3, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 2, text: 2, reasoning: undefined },
};
const finishReason = { unified: "stop", raw: "stop" };
const generated = (text) => ({ content: [{ type: "text", text }], finishReason, usage, warnings: [] });
const streamed = (pieces) => ({
  stream: convertArrayToReadableStream([
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "t" },
    ...pieces.map((delta) => ({ type: "text-delta", id: "t", delta })),
    { type: "text-end", id: "t" },
    { type: "finish", finishReason, usage },
  ]),
});
const systemOf = (call) => call.prompt.filter((m) => m.role === "system").map((m) => m.content);

async function memoriesOf(tm, userId) {
  for (let i = 0; i < 240; i++) {
    const { data } = await tm.listMemories(userId);
    if (data.length) return data;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`no memory of ${userId}`);
}

describe("tiermem/ai against tiermem serve", { skip }, () => {
  test("generateText: the exchange is stored, and the memory is in front of the next call", async () => {
    const tm = new Client(url, appKey);
    const userId = newId("ana");
    const sessionId = newId("s");
    const stored = [];
    const model = new MockLanguageModelV3({ doGenerate: [generated("Nice!"), generated("In Berlin.")] });
    const middleware = tiermemMiddleware(tm, { userId, sessionId, onStored: (t) => stored.push(t) });
    const wrapped = wrapLanguageModel({ model, middleware });

    const first = await generateText({ model: wrapped, system: "Be brief.", prompt: "I live in Berlin and I love jazz." });
    assert.equal(first.text, "Nice!");
    assert.equal(stored.length, 1);
    const job = await tm.waitForJob(stored[0].job_id, { timeoutMs: 60_000 });
    assert.equal(job.status, "done", JSON.stringify(job));
    const messages = await tm.listMessages(sessionId);
    assert.deepEqual(
      messages.data.map((m) => [m.role, m.content]),
      [["user", "I live in Berlin and I love jazz."], ["assistant", "Nice!"]],
    );

    // Another session of the same user: the memory comes from tiermem, not from the prompt.
    const other = wrapLanguageModel({ model, middleware: tiermemMiddleware(tm, { userId, sessionId: newId("s") }) });
    const second = await generateText({ model: other, system: "Be brief.", prompt: "Where do I live?" });
    assert.equal(second.text, "In Berlin.");
    const call = model.doGenerateCalls[1];
    const [own, memory] = systemOf(call);
    assert.equal(own, "Be brief.");
    assert.match(memory, /Berlin/);
    assert.equal(call.prompt[0].role, "system");
    assert.equal(call.prompt.at(-1).role, "user");
  });

  test("streamText: the reply is streamed unchanged and stored once the stream ends", async () => {
    const tm = new Client(url, appKey);
    const userId = newId("ben");
    const sessionId = newId("s");
    await tm.storeTurn(newId("s"), { userId, userMessage: "I'm a nurse in Leeds." }).then((t) =>
      tm.waitForJob(t.job_id, { timeoutMs: 60_000 }),
    );
    await memoriesOf(tm, userId);
    const model = new MockLanguageModelV3({ doStream: streamed(["Leeds ", "has good ", "hospitals."]) });
    const stored = [];
    const wrapped = wrapLanguageModel({
      model,
      middleware: tiermemMiddleware(tm, { userId, sessionId, onStored: (t) => stored.push(t) }),
    });

    const result = streamText({ model: wrapped, prompt: "Where should I work?" });
    let text = "";
    for await (const delta of result.textStream) text += delta;
    assert.equal(text, "Leeds has good hospitals.");
    assert.match(systemOf(model.doStreamCalls[0])[0], /nurse/);
    assert.equal(stored.length, 1);
    const messages = await tm.listMessages(sessionId);
    assert.deepEqual(
      messages.data.map((m) => m.content),
      ["Where should I work?", "Leeds has good hospitals."],
    );
  });

  test("per call: providerOptions.tiermem names the user and session; store: false stores nothing", async () => {
    const tm = new Client(url, appKey);
    const userId = newId("cy");
    const sessionId = newId("s");
    const model = new MockLanguageModelV3({ doGenerate: [generated("Hello."), generated("Again.")] });
    const wrapped = wrapLanguageModel({ model, middleware: tiermemMiddleware(tm, { userId: "nobody", sessionId: "none" }) });
    await generateText({
      model: wrapped,
      prompt: "Hi there, I'm Cy.",
      providerOptions: { tiermem: { userId, sessionId } },
    });
    assert.equal((await tm.listMessages(sessionId)).count, 2);

    const readOnly = wrapLanguageModel({ model, middleware: tiermemMiddleware(tm, { userId, sessionId, store: false }) });
    await generateText({ model: readOnly, prompt: "Just asking." });
    assert.equal((await tm.listMessages(sessionId)).count, 2);
  });

  test("tiermem unreachable: the model answers without memory and the error is reported", async () => {
    const down = new Client("http://127.0.0.1:9", appKey, { retry: { maxAttempts: 1 } });
    const errors = [];
    const model = new MockLanguageModelV3({ doGenerate: generated("Still here.") });
    const wrapped = wrapLanguageModel({
      model,
      middleware: tiermemMiddleware(down, { userId: "u", sessionId: "s", onError: (e, during) => errors.push([e.name, during]) }),
    });
    const result = await generateText({ model: wrapped, prompt: "Hello?" });
    assert.equal(result.text, "Still here.");
    assert.deepEqual(errors, [["ConnectionFailed", "context"], ["ConnectionFailed", "store"]]);
    assert.deepEqual(systemOf(model.doGenerateCalls[0]), []);
  });
});
