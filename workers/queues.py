"""Queue names, task names and routes: live extraction, compression, replay and maintenance
never share a queue. The queue names are shared.ops.queue_names' (ops lists the same queues)."""

from shared.ops.queue_names import COMPRESS, EXTRACT, MAINTENANCE, QUEUES, REPLAY

__all__ = [
    "COMPRESS",
    "COMPRESS_SESSION",
    "DELIVER_WEBHOOK",
    "DISPATCH_WEBHOOKS",
    "EXTRACT",
    "EXTRACT_BATCH",
    "EXTRACT_SESSION",
    "EXTRACT_TURN",
    "MAINTENANCE",
    "QUEUES",
    "REPLAY",
    "REPLAY_DISPATCH",
    "REPLAY_TURN",
    "SWEEP_OUTBOX",
    "TASK_ROUTES",
]

EXTRACT_TURN = "tiermem.extract_turn"
# With batching on (ADR 0024): a session's batch check, and one batch of its turns.
EXTRACT_SESSION = "tiermem.extract_session"
EXTRACT_BATCH = "tiermem.extract_batch"
SWEEP_OUTBOX = "tiermem.sweep_outbox"
# Webhooks (ADR 0027): beat's dispatch pass, and one delivery attempt.
DISPATCH_WEBHOOKS = "tiermem.dispatch_webhooks"
DELIVER_WEBHOOK = "tiermem.deliver_webhook"
COMPRESS_SESSION = "tiermem.compress_session"
REPLAY_DISPATCH = "tiermem.replay_dispatch"
REPLAY_TURN = "tiermem.replay_turn"

TASK_ROUTES = {
    EXTRACT_TURN: {"queue": EXTRACT},
    EXTRACT_SESSION: {"queue": EXTRACT},
    EXTRACT_BATCH: {"queue": EXTRACT},
    # Its own queue: a sweep must not wait behind the extract backlog it is there to help.
    SWEEP_OUTBOX: {"queue": MAINTENANCE},
    # Beside the sweeps: I/O bound, at most TIERMEM_WEBHOOKS__MAX_IN_FLIGHT queued at once.
    DISPATCH_WEBHOOKS: {"queue": MAINTENANCE},
    DELIVER_WEBHOOK: {"queue": MAINTENANCE},
    COMPRESS_SESSION: {"queue": COMPRESS},
    "tiermem.replay_*": {"queue": REPLAY},
}
