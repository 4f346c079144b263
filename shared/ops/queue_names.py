"""The queue names, alone in a module that imports nothing: workers.queues routes tasks to
them, ops lists them, and the command line's help shows them without loading the rest."""

# Maintenance (the outbox sweep) has no SQL runs of its own: ops shows its broker numbers only.
EXTRACT, COMPRESS, REPLAY, MAINTENANCE = "extract", "compress", "replay", "maintenance"
QUEUES = (EXTRACT, COMPRESS, REPLAY, MAINTENANCE)
