// The Vercel AI SDK over tiermem (`import { tiermemMiddleware } from "tiermem/ai"`): a
// language-model middleware that puts what tiermem remembers about the user in front of
// each call and stores the exchange after it, for `wrapLanguageModel` of the `ai` package
// (AI SDK 6: middleware specification v3). Only types come from `@ai-sdk/provider`: the
// package keeps no runtime dependency.
import type {
  LanguageModelV3CallOptions,
  LanguageModelV3Middleware,
  LanguageModelV3Prompt,
  LanguageModelV3StreamPart,
} from "@ai-sdk/provider";

import type { Client } from "../client.js";
import type { TurnAccepted } from "../models.js";

export interface TiermemMiddlewareOptions {
  /** The tiermem user whose memory this is. */
  userId: string;
  /** The tiermem session the exchanges are stored in. */
  sessionId: string;
  /** The context's budget (default: the server's, `TIERMEM_CONTEXT__DEFAULT_BUDGET_TOKENS`). */
  budgetTokens?: number;
  /** false: only read the memory, store nothing. */
  store?: boolean;
  /** Called with each stored turn (its `job_id` is the extraction's). */
  onStored?: (turn: TurnAccepted) => void;
  /** A tiermem call that failed: the model is called all the same, without memory or
   * without storing. Default: `console.warn` of the error's name and message. */
  onError?: (error: unknown, during: "context" | "store") => void;
}

/** A `LanguageModelMiddleware`: before each call, tiermem's context for the last user
 * message (the user's memories and relevant earlier messages from other sessions) as a system
 * message after the caller's own system messages; after it, the user's message and the reply
 * stored as a turn, whose extraction tiermem queues. `providerOptions.tiermem.userId` /
 * `.sessionId` on a call override the options. */
export function tiermemMiddleware(client: Client, options: TiermemMiddlewareOptions): LanguageModelV3Middleware {
  const onError = options.onError ?? warn;
  const scope = (params: LanguageModelV3CallOptions) => {
    const own = params.providerOptions?.["tiermem"] ?? {};
    return {
      userId: typeof own["userId"] === "string" ? own["userId"] : options.userId,
      sessionId: typeof own["sessionId"] === "string" ? own["sessionId"] : options.sessionId,
    };
  };
  const store = async (params: LanguageModelV3CallOptions, reply: string) => {
    const said = lastUserText(params.prompt);
    if (options.store === false || !said.trim()) return;
    const { userId, sessionId } = scope(params);
    try {
      const turn = await client.storeTurn(sessionId, {
        userId,
        userMessage: said,
        assistantMessage: reply.trim() ? reply : undefined,
      });
      options.onStored?.(turn);
    } catch (error) {
      onError(error, "store");
    }
  };

  return {
    specificationVersion: "v3",

    async transformParams({ params }) {
      const { userId, sessionId } = scope(params);
      const query = lastUserText(params.prompt);
      try {
        const context = await client.getContext(sessionId, {
          userId,
          query: query.trim() ? query : undefined,
          budgetTokens: options.budgetTokens,
        });
        const memory = context.messages.find((m) => m.role === "system")?.content;
        return memory ? { ...params, prompt: withSystem(params.prompt, memory) } : params;
      } catch (error) {
        onError(error, "context");
        return params;
      }
    },

    async wrapGenerate({ doGenerate, params }) {
      const result = await doGenerate();
      const reply = result.content.map((part) => (part.type === "text" ? part.text : "")).join("");
      await store(params, reply);
      return result;
    },

    async wrapStream({ doStream, params }) {
      const { stream, ...rest } = await doStream();
      let reply = "";
      const collect = new TransformStream<LanguageModelV3StreamPart, LanguageModelV3StreamPart>({
        transform(part, controller) {
          if (part.type === "text-delta") reply += part.delta;
          controller.enqueue(part);
        },
        // The stream ends once the turn is stored: a caller that reads it to the end can
        // rely on the exchange being in tiermem.
        flush: () => store(params, reply),
      });
      return { stream: stream.pipeThrough(collect), ...rest };
    },
  };
}

/** The text of the prompt's last user message ("" when it has none). */
function lastUserText(prompt: LanguageModelV3Prompt): string {
  for (let i = prompt.length - 1; i >= 0; i--) {
    const message = prompt[i];
    if (message?.role === "user") {
      return message.content.map((part) => (part.type === "text" ? part.text : "")).join("");
    }
  }
  return "";
}

/** The prompt with `memory` as a system message after its leading system messages. */
function withSystem(prompt: LanguageModelV3Prompt, memory: string): LanguageModelV3Prompt {
  const at = prompt.findIndex((m) => m.role !== "system");
  const split = at === -1 ? prompt.length : at;
  return [...prompt.slice(0, split), { role: "system", content: memory }, ...prompt.slice(split)];
}

function warn(error: unknown, during: "context" | "store"): void {
  const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  console.warn(`tiermem: ${during === "context" ? "no memory for this call" : "turn not stored"} (${what})`);
}
