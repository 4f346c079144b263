/** Reads /v1/chat's event stream: `data: {"delta": …}` events, then the stored turn's ids
 * (`{"done": true, …}`) or an error (`{"error": {code, message, details}}`). */

import { fromEvent } from "./errors.js";
import { connectionFailed, type Deadline } from "./http.js";
import type { ChatPublic } from "./models.js";

export interface OpenedStream {
  body: ReadableStream<Uint8Array>;
  timer: Deadline;
}

/** The reply's deltas as they come (`for await (const delta of stream)`); once the loop
 * ends, `result` holds the stored turn's ids, usage and context counts (its `reply` is the
 * whole text). The request is sent when the first loop starts (a second loop yields
 * nothing); leaving the loop early closes it (the server stores the part of the reply that
 * was sent). */
export class ChatStream implements AsyncIterable<string> {
  result: ChatPublic | null = null;
  private readonly deltas: string[] = [];
  private sent = false;

  constructor(private readonly open: () => Promise<OpenedStream>) {}

  async *[Symbol.asyncIterator](): AsyncIterator<string> {
    // Read once, as the Python SDK's: a second loop would send the message again.
    if (this.sent) return;
    this.sent = true;
    const { body, timer } = await this.open();
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    try {
      for (;;) {
        timer.arm();
        let piece: ReadableStreamReadResult<Uint8Array>;
        try {
          piece = await reader.read();
        } catch (error) {
          throw connectionFailed("POST", "/v1/chat", timer.expired ? timer.error() : error, 1);
        }
        pending += piece.done ? decoder.decode() : decoder.decode(piece.value, { stream: true });
        const lines = pending.split("\n");
        pending = piece.done ? "" : (lines.pop() ?? "");
        for (const line of lines) {
          const delta = this.feed(line.replace(/\r$/, ""));
          if (delta !== null) yield delta;
        }
        if (piece.done) return;
      }
    } finally {
      timer.clear();
      await reader.cancel().catch(() => undefined);
    }
  }

  private feed(line: string): string | null {
    if (!line.startsWith("data:")) return null;
    const event = JSON.parse(line.slice("data:".length)) as Record<string, unknown>;
    if ("delta" in event) {
      const delta = String(event["delta"]);
      this.deltas.push(delta);
      return delta;
    }
    if ("error" in event) throw fromEvent(event["error"] as Record<string, unknown>);
    if (event["done"]) {
      const { done: _, ...rest } = event;
      this.result = { ...rest, reply: this.deltas.join("") } as ChatPublic;
    }
    return null;
  }
}
