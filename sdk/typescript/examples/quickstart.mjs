// The README's example: store a turn, wait for its extraction, find the memory.
// `node examples/quickstart.mjs` beside a running `tiermem serve` (after `npm install tiermem`).
import { Client, NotFound } from "tiermem";

const tm = new Client(process.env.TIERMEM_URL ?? "http://127.0.0.1:8000", process.env.TIERMEM_APP_KEY ?? "dev-app-key");

const turn = await tm.storeTurn("s1", {
  userId: "ana",
  userMessage: { content: "I live in Berlin.", speaker: "Ana", external_id: "m1" },
  assistantMessage: "Nice!",
});
const job = await tm.waitForJob(turn.job_id, { timeoutMs: 60_000 }); // done | skipped | failed | dropped
console.log("job", job.status, "facts added", job.facts_added);

const found = await tm.searchMemories("ana", "Where does Ana live?", { k: 3 });
for (const memory of found.data) console.log(memory.score?.toFixed(2), memory.type, memory.content);

try {
  await tm.getMemory("ana", "no-such-id");
} catch (error) {
  if (!(error instanceof NotFound)) throw error;
  console.log(error.status, error.code); // 404 not_found
}
