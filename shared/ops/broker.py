"""What the Redis broker holds right now: queue depths, unacknowledged messages, paused queues."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.ops.queue_names import QUEUES

# kombu's Redis transport keeps a queue's messages of priority p > 0 in "<queue>\x06\x16<p>".
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (0, 3, 6, 9)
# Unacked messages: a hash delivery_tag → [message, exchange, routing_key] (kombu).
_UNACKED_KEY = "unacked"
PAUSED_KEY = "tiermem:ops:paused"  # a Redis set of paused queue names


@dataclass
class BrokerView:
    """One read of the broker: depth and reserved counts per queue, and paused queues."""

    depth: dict[str, int] = field(default_factory=dict)
    reserved: dict[str, int] = field(default_factory=dict)
    paused: set[str] = field(default_factory=set)
    available: bool = False


def read_broker(redis_url: str | None, queues: Sequence[str] = QUEUES) -> BrokerView:
    if not redis_url:
        return BrokerView()  # the in-process broker of `tiermem serve` is not inspectable
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            for step in _PRIORITY_STEPS:
                pipe.llen(queue if step == 0 else f"{queue}{_PRIORITY_SEP}{step}")
        pipe.hvals(_UNACKED_KEY)
        pipe.smembers(PAUSED_KEY)
        replies = pipe.execute()
    finally:
        client.close()
    view = BrokerView(available=True)
    per_queue = len(_PRIORITY_STEPS)
    for i, queue in enumerate(queues):
        view.depth[queue] = sum(int(n) for n in replies[i * per_queue : (i + 1) * per_queue])
        view.reserved[queue] = 0
    for raw in replies[-2]:
        routing_key = _routing_key(raw)
        if routing_key in view.reserved:
            view.reserved[routing_key] += 1
    view.paused = {p.decode() if isinstance(p, bytes) else str(p) for p in replies[-1]}
    return view


def _routing_key(raw: bytes | str) -> str | None:
    try:
        entry = json.loads(raw)
        return str(entry[2])
    except (ValueError, IndexError, TypeError):
        return None
