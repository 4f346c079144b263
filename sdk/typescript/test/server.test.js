// Client against a real `tiermem serve` (started by tests/sdk/test_typescript_client.py,
// which passes its URL and keys in the environment): a turn stored, extracted, found,
// exported and erased; chat and its stream; sessions; admin; the API's errors as typed
// errors. Without TIERMEM_URL these tests are skipped.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";

import { Client, NotFound, TiermemError, Unauthorized, ValidationFailed } from "../dist/index.js";

const url = process.env.TIERMEM_URL;
const appKey = process.env.TIERMEM_APP_KEY ?? "dev-app-key";
const adminKey = process.env.TIERMEM_ADMIN_KEY ?? "dev-admin-key";
// The scripted chat model's reply to a message containing TIERMEM_TEST_CHAT_MATCH.
const chatMatch = process.env.TIERMEM_TEST_CHAT_MATCH;
const chatReply = process.env.TIERMEM_TEST_CHAT_REPLY;
const skip = url ? false : "TIERMEM_URL is not set (a running `tiermem serve`)";

const newId = (prefix) => `${prefix}-${randomUUID().slice(0, 8)}`;
const client = () => new Client(url, appKey, { timeoutMs: 30_000 });

describe("against tiermem serve", { skip }, () => {
  test("a turn is stored, extracted, found, exported and erased", async () => {
    const tm = client();
    const user = newId("ana");
    const session = newId("s");
    const said = { content: "I live in Berlin and I love jazz.", speaker: "Ana", external_id: "m1" };
    const reply = { content: "Nice!", external_id: "m2" };
    const turn = await tm.storeTurn(session, { userId: user, userMessage: said, assistantMessage: reply });
    assert.equal(turn.user_id, user);
    assert.equal(turn.message_ids.length, 2);
    assert.ok(turn.job_id);
    assert.equal(turn.duplicate, false);

    const job = await tm.waitForJob(turn.job_id, { timeoutMs: 60_000 });
    assert.equal(job.status, "done", JSON.stringify(job));
    assert.ok(job.facts_added >= 2);

    const found = await tm.searchMemories(user, "Where does Ana live?", { k: 5 });
    const berlin = found.data.find((m) => m.content.includes("Berlin"));
    assert.ok(berlin, JSON.stringify(found.data));
    assert.equal(typeof berlin.score, "number");
    assert.equal(berlin.sources[0].external_id, "m1");

    const listed = await tm.listMemories(user);
    assert.ok(listed.count >= 2 && listed.count === listed.data.length);
    assert.equal((await tm.getMemory(user, berlin.id)).content, berlin.content);
    const walked = [];
    for await (const memory of tm.iterMemories(user, { pageSize: 1 })) walked.push(memory.id);
    assert.deepEqual(walked, listed.data.map((m) => m.id));
    const preferences = [];
    for await (const memory of tm.iterMemories(user, { types: ["preference"] })) preferences.push(memory.id);
    assert.deepEqual(preferences, listed.data.filter((m) => m.type === "preference").map((m) => m.id));

    const context = await tm.getContext(session, { query: "what music do I like?" });
    assert.equal(context.user_id, user);
    assert.ok(context.token_count <= context.budget_tokens);
    const inContext = Object.values(context.memories).flat();
    assert.ok(inContext.some((m) => m.content.includes("jazz")), JSON.stringify(context.memories));

    const hits = await tm.searchHistory(user, "jazz", { k: 3 });
    assert.ok(hits.count >= 1 && hits.data[0].content.includes("jazz"));

    // what the memory browser reads: the tenant's users, the user's sessions, runs and beliefs
    const [listedUser] = (await tm.listUsers({ q: user })).data;
    assert.equal(listedUser.user_id, user);
    assert.deepEqual((await tm.listSessions(user)).data.map((s) => s.session_id), [session]);
    const [run] = (await tm.listRuns(user, { status: ["done"] })).data;
    assert.equal(run.id, turn.job_id);
    const location = (await tm.getBeliefs(user)).data.find((s) => s.slot === "identity/location");
    assert.equal(location.current, "Berlin");

    const again = await tm.storeTurn(session, { userId: user, userMessage: said, assistantMessage: reply });
    assert.equal(again.duplicate, true);
    assert.equal(again.job_id, turn.job_id);

    const exported = await tm.exportUser(user);
    assert.deepEqual(exported.messages.map((m) => m.content), [said.content, "Nice!"]);
    assert.deepEqual(new Set(exported.memories.map((m) => m.id)), new Set(listed.data.map((m) => m.id)));

    assert.equal(await tm.deleteMemory(user, berlin.id), undefined);
    const gone = await tm.getMemory(user, berlin.id).catch((e) => e);
    assert.ok(gone instanceof NotFound && gone instanceof TiermemError, String(gone));
    assert.equal(gone.status, 404);
    assert.equal(gone.code, "not_found");

    const deleted = await tm.deleteUser(user);
    assert.equal(deleted.deleted.messages, 2);
    await assert.rejects(tm.listMemories(user), NotFound);
  });

  test("import, then wait for its job", async () => {
    const tm = client();
    const user = newId("ben");
    const session = newId("s");
    const lines = [
      { user_id: user, session_id: session, role: "user", content: "I'm a nurse.", external_id: "l1" },
      { user_id: user, session_id: session, role: "assistant", content: "Great.", external_id: "l2" },
    ];
    const accepted = await tm.importMessages(lines);
    assert.equal(accepted.stored, 2);
    assert.equal(accepted.job_ids.length, 1);
    const job = await tm.waitForJob(accepted.job_ids[0], { timeoutMs: 60_000 });
    assert.ok(["done", "skipped"].includes(job.status), job.status);
    assert.equal((await tm.importMessages(lines)).duplicates, 2);
  });

  test("chat and its stream store the turn", { skip: chatMatch ? false : "no scripted chat model" }, async () => {
    const tm = client();
    const user = newId("cy");
    const session = newId("s");
    const answer = await tm.chat({ userId: user, sessionId: session, message: `Say ${chatMatch}, once.` });
    assert.equal(answer.reply, chatReply);
    assert.equal(answer.message_ids.length, 2);

    const stream = tm.chatStream({ userId: user, sessionId: session, message: `And ${chatMatch} again?` });
    const deltas = [];
    for await (const delta of stream) deltas.push(delta);
    assert.ok(deltas.length > 1, `one piece: ${deltas}`);
    assert.equal(deltas.join(""), chatReply);
    assert.equal(stream.result.reply, chatReply);
    assert.ok(stream.result.job_id);
    assert.equal(stream.result.message_ids.length, 2);
    assert.ok(stream.result.context.memories >= 0 && stream.result.usage.completion_tokens > 0);
    const exported = await tm.exportUser(user);
    assert.equal(exported.messages.at(-1).content, chatReply);
  });

  test("a session's tiers, compaction, settings and continuation", async () => {
    const tm = client();
    const user = newId("dee");
    const session = newId("s");
    for (let n = 0; n < 3; n++) {
      await tm.storeTurn(session, {
        userId: user,
        userMessage: `Tell me about topic ${n}.`,
        assistantMessage: `Topic ${n} matters for reason ${n}.`,
      });
    }
    const messages = await tm.listMessages(session);
    assert.equal(messages.count, 6);
    assert.equal(messages.data[0].content, "Tell me about topic 0.");
    const lastTwo = await tm.listMessages(session, { limit: 2, newestFirst: true });
    assert.deepEqual(lastTwo.data.map((m) => m.role), ["assistant", "user"]);
    assert.equal(lastTwo.data[0].content, "Topic 2 matters for reason 2.");

    const tiers = await tm.getTiers(session);
    assert.ok(tiers.partition_ok);
    assert.equal(tiers.tiers.at(-1).name, "current");

    const run = await tm.compact(session, { focus: "topics" });
    assert.equal(run.trigger, "compact");
    const finished = await tm.waitForCompressionRun(session, run.id, { timeoutMs: 60_000 });
    assert.ok(!["pending", "running", "retrying"].includes(finished.status), finished.status);
    assert.ok((await tm.listCompressionRuns(session)).data.some((r) => r.id === run.id));
    assert.equal((await tm.getCompressionRun(session, run.id)).id, run.id);

    const settings = await tm.setCompressionSettings(session, { pinHead: false, triggerRatio: 0.8 });
    assert.deepEqual(settings.overrides, { pin_head: false, trigger_ratio: 0.8 });
    assert.equal((await tm.getCompressionSettings(session)).effective.pin_head, false);

    const child = await tm.continueSession(session, { newSessionId: `${session}-2` });
    assert.equal(child.session_id, `${session}-2`);
    assert.equal(child.parent_session_id, session);
  });

  test("admin: a tenant, its keys, the ops views; its app key reaches only it", async () => {
    const operator = new Client(url, adminKey);
    const created = await operator.createTenant(newId("acme"));
    assert.equal(created.app_key.scope, "app");
    assert.ok((await operator.listTenants()).some((t) => t.id === created.tenant.id));
    const admin = await operator.createKey(created.tenant.id, { name: "ops", scope: "admin" });
    assert.equal(admin.tenant_id, created.tenant.id);
    assert.equal(admin.scope, "admin");
    assert.ok(Array.isArray(await operator.opsWorkers()));
    assert.equal(typeof (await operator.opsVectors()).engine, "string");
    assert.ok((await operator.opsQueues({ failedLimit: 5 })).queues !== undefined);
    assert.ok(await operator.opsTimeseries({ minutes: 5 }));
    assert.ok(Array.isArray(await operator.listReplays()));

    const app = new Client(url, created.app_key.key);
    const turn = await app.storeTurn("s1", { userId: "zoe", userMessage: "I work at Siemens." });
    assert.equal((await app.waitForJob(turn.job_id, { timeoutMs: 60_000 })).status, "done");
    await assert.rejects(client().listMemories("zoe"), NotFound);
  });

  test("bad input is a ValidationFailed with each field's rule", async () => {
    const error = await client()
      .storeTurn("s1", { userId: "no spaces allowed!", userMessage: "hi" })
      .catch((e) => e);
    assert.ok(error instanceof ValidationFailed, String(error));
    assert.equal(error.status, 422);
    assert.ok(Array.isArray(error.details.errors) && error.details.errors.length >= 1);
    assert.ok(error.details.errors.some((e) => e.loc.includes("user_id")), JSON.stringify(error.details));
  });

  test("a wrong key is Unauthorized, and not retried", async () => {
    const started = Date.now();
    const error = await new Client(url, "not-a-key").listMemories("ana").catch((e) => e);
    assert.ok(error instanceof Unauthorized, String(error));
    assert.equal(error.status, 401);
    assert.equal(error.name, "Unauthorized");
    assert.ok(Date.now() - started < 5_000);
  });
});
