"""The server's own request and response models, re-exported: the SDK parses what the routes
declare, so a field changed on the server changes here in the same commit."""

from __future__ import annotations

from shared.chat.models import ChatIn, ChatPublic, ContextStats, Usage
from shared.compression.models import (
    CompactIn,
    CompressionRunList,
    CompressionRunPublic,
    CompressionSettingsIn,
    CompressionSettingsPublic,
    ContinueIn,
    ContinuePublic,
    TiersPublic,
)
from shared.context.models import ContextPublic
from shared.extraction.schemas import FactType
from shared.memory.models import (
    BeliefChange,
    BeliefSlot,
    BeliefTimeline,
    BeliefValue,
    MemoriesPublic,
    MemoryPublic,
    MessageExported,
    MessageHit,
    MessageHitsPublic,
    MessageRef,
    SearchIn,
    SessionMessagesPublic,
    UserDeleted,
    UserExport,
)
from shared.ops.control import QueueState, RetryIn, RetryOut
from shared.ops.models import OpsSnapshot
from shared.ops.timeseries import Series
from shared.ops.vectors import VectorStats
from shared.ops.workers import WorkerInfo
from shared.records.models import (
    ImportAccepted,
    ImportIn,
    MessageIn,
    SessionList,
    SessionSummary,
    TranscriptLine,
    TurnAccepted,
    TurnIn,
    UserList,
    UserSummary,
)
from shared.records.replay import ReplayIn, ReplayProgress
from shared.records.runs import JobPublic, UserRunList, UserRunPublic
from shared.records.tenancy import KeyCreated, KeyIn, TenantCreated, TenantIn, TenantPublic
from shared.webhooks.models import (
    DeliveryFailing,
    EventPage,
    EventPublic,
    WebhookCreated,
    WebhookIn,
    WebhookList,
    WebhookOps,
    WebhookPublic,
    WebhookUpdate,
)
from shared.webhooks.models import PingResult as WebhookPing

__all__ = [
    "UserRunPublic",
    "UserRunList",
    "UserSummary",
    "UserList",
    "SessionSummary",
    "SessionList",
    "BeliefValue",
    "BeliefTimeline",
    "BeliefSlot",
    "BeliefChange",
    "ChatIn",
    "ChatPublic",
    "CompactIn",
    "CompressionRunList",
    "CompressionRunPublic",
    "CompressionSettingsIn",
    "CompressionSettingsPublic",
    "ContextPublic",
    "ContextStats",
    "ContinueIn",
    "ContinuePublic",
    "DeliveryFailing",
    "EventPage",
    "EventPublic",
    "FactType",
    "ImportAccepted",
    "ImportIn",
    "JobPublic",
    "KeyCreated",
    "KeyIn",
    "MemoriesPublic",
    "MemoryPublic",
    "MessageExported",
    "MessageHit",
    "MessageHitsPublic",
    "MessageIn",
    "MessageRef",
    "OpsSnapshot",
    "QueueState",
    "ReplayIn",
    "ReplayProgress",
    "RetryIn",
    "RetryOut",
    "SearchIn",
    "Series",
    "SessionMessagesPublic",
    "TenantCreated",
    "TenantIn",
    "TenantPublic",
    "TiersPublic",
    "TranscriptLine",
    "TurnAccepted",
    "TurnIn",
    "Usage",
    "UserDeleted",
    "UserExport",
    "VectorStats",
    "WebhookCreated",
    "WebhookIn",
    "WebhookList",
    "WebhookOps",
    "WebhookPing",
    "WebhookPublic",
    "WebhookUpdate",
    "WorkerInfo",
]
