/** tiermem's TypeScript client: `import { Client } from "tiermem"`. */

export { ChatStream } from "./chat-stream.js";
export {
  Client,
  JOB_FINISHED,
  REPLAY_FINISHED,
  RUN_FINISHED,
  type ChatOptions,
  type CompressionSettings,
  type MemoryFilters,
  type WaitOptions,
} from "./client.js";
export {
  BadRequest,
  Conflict,
  ConnectionFailed,
  Forbidden,
  NotFound,
  RateLimited,
  ServerError,
  TiermemError,
  Unauthorized,
  Unavailable,
  UpstreamError,
  ValidationFailed,
  WaitTimedOut,
} from "./errors.js";
export { VERSION, type ClientOptions, type Fetch } from "./http.js";
export type * from "./models.js";
export { NO_RETRIES, parseRetryAfter, RetryPolicy, type RetryOptions } from "./retry.js";
export type { components, paths } from "./schema.js";
