/** The server's request and response shapes, named as the Python SDK's `tiermem.models`
 * names them: aliases of the types generated from the OpenAPI document (src/schema.ts). */

import type { components, paths } from "./schema.js";

type Schemas = components["schemas"];

export type ChatPublic = Schemas["ChatPublic"];
export type CompressionRunList = Schemas["CompressionRunList"];
export type CompressionRunPublic = Schemas["CompressionRunPublic"];
export type CompressionSettingsPublic = Schemas["CompressionSettingsPublic"];
export type ContextPublic = Schemas["ContextPublic"];
export type ContextStats = Schemas["ContextStats"];
export type ContinuePublic = Schemas["ContinuePublic"];
export type ErrorResponse = Schemas["ErrorResponse"];
export type ImportAccepted = Schemas["ImportAccepted"];
export type JobPublic = Schemas["JobPublic"];
export type KeyCreated = Schemas["KeyCreated"];
export type MemoriesPublic = Schemas["MemoriesPublic"];
export type MemoryPublic = Schemas["MemoryPublic"];
export type MessageHit = Schemas["MessageHit"];
export type MessageHitsPublic = Schemas["MessageHitsPublic"];
export type MessageIn = Schemas["MessageIn"];
export type MessageRef = Schemas["MessageRef"];
export type OpsSnapshot = Schemas["OpsSnapshot"];
export type QueueState = Schemas["QueueState"];
export type ReplayProgress = Schemas["ReplayProgress"];
export type RetryOut = Schemas["RetryOut"];
export type Series = Schemas["Series"];
export type SessionMessagesPublic = Schemas["SessionMessagesPublic"];
export type MessageExported = Schemas["MessageExported"];
export type TenantCreated = Schemas["TenantCreated"];
export type TenantPublic = Schemas["TenantPublic"];
export type TiersPublic = Schemas["TiersPublic"];
export type TranscriptLine = Schemas["TranscriptLine"];
export type TurnAccepted = Schemas["TurnAccepted"];
export type Usage = Schemas["Usage"];
export type UserDeleted = Schemas["UserDeleted"];
export type UserExport = Schemas["UserExport"];
export type VectorStats = Schemas["VectorStats"];
export type WorkerInfo = Schemas["WorkerInfo"];
export type WebhookCreated = Schemas["WebhookCreated"];
export type WebhookList = Schemas["WebhookList"];
export type WebhookPublic = Schemas["WebhookPublic"];
export type WebhookOps = Schemas["WebhookOps"];
export type PingResult = Schemas["PingResult"];
export type EventPage = Schemas["EventPage"];
export type EventPublic = Schemas["EventPublic"];
export type BeliefTimeline = Schemas["BeliefTimeline"];
export type BeliefSlot = Schemas["BeliefSlot"];
export type BeliefValue = Schemas["BeliefValue"];
export type UserList = Schemas["UserList"];
export type UserSummary = Schemas["UserSummary"];
export type SessionList = Schemas["SessionList"];
export type SessionSummary = Schemas["SessionSummary"];
export type UserRunList = Schemas["UserRunList"];
export type UserRunPublic = Schemas["UserRunPublic"];
/** An extraction run's status, as GET /v1/users/{user_id}/runs filters by it. */
export type RunStatus = NonNullable<
  NonNullable<paths["/v1/users/{user_id}/runs"]["get"]["parameters"]["query"]>["status"]
>[number];

/** The kinds of memory: identity, preference, fact, decision, goal, relationship. */
export type FactType = NonNullable<
  NonNullable<paths["/v1/users/{user_id}/memories"]["get"]["parameters"]["query"]>["type"]
>[number];
/** A message: its text, or its text with a speaker, an external id (safe re-sending) and a time. */
export type Message = string | MessageIn;
