"""Queue names and routes: live extraction, compression, replay and maintenance never share
a queue. The names are shared.ops.queues' (ops lists the same queues)."""

from shared.ops.queues import COMPRESS, EXTRACT, MAINTENANCE, QUEUES, REPLAY

__all__ = ["COMPRESS", "EXTRACT", "MAINTENANCE", "QUEUES", "REPLAY", "TASK_ROUTES"]

TASK_ROUTES = {
    "tiermem.extract_turn": {"queue": EXTRACT},
    # Its own queue: a sweep must not wait behind the extract backlog it is there to help.
    "tiermem.sweep_outbox": {"queue": MAINTENANCE},
    "tiermem.compress_session": {"queue": COMPRESS},
    "tiermem.replay_*": {"queue": REPLAY},
}
