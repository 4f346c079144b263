"""Queue names, in one place: live extraction, compression and replay never share a queue."""

EXTRACT = "extract"
COMPRESS = "compress"
REPLAY = "replay"
ALL = (EXTRACT, COMPRESS, REPLAY)

TASK_ROUTES = {
    "tiermem.extract_turn": {"queue": EXTRACT},
    "tiermem.sweep_outbox": {"queue": EXTRACT},
    "tiermem.compress_session": {"queue": COMPRESS},
    "tiermem.replay_*": {"queue": REPLAY},
}
