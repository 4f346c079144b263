"""Live workers: each worker process writes a heartbeat record; ops reads them back.

Redis holds the records (a key per worker with a TTL, so a dead worker drops out on its
own); without Redis (`tiermem serve`) they live in this process, which is also where the
one worker runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from shared.config import Settings
from shared.db.models import utcnow

KEY_PREFIX = "tiermem:ops:worker:"


class ActiveTask(BaseModel):
    id: str
    name: str
    started_at: dt.datetime | None
    args: list[Any]


class WorkerInfo(BaseModel):
    hostname: str
    pid: int
    queues: list[str]  # consumed now
    configured_queues: list[str]  # consumed when it started (a paused queue leaves `queues`)
    pool: str
    concurrency: int
    active: int  # tasks executing now
    reserved: int  # prefetched, waiting for a free slot
    processed: int  # tasks accepted since the worker started
    started_at: dt.datetime
    heartbeat_at: dt.datetime
    heartbeat_age_s: float = 0.0
    active_tasks: list[ActiveTask] = []


class HeartbeatStore:
    """Worker records in Redis, or without Redis in files under the data folder, so that
    `tiermem ops status` in another process sees the workers of a running `tiermem serve`."""

    def __init__(self, redis_url: str | None, *, ttl_s: float, folder: Path) -> None:
        self.redis_url = redis_url
        self.ttl_s = ttl_s
        self.folder = folder

    @classmethod
    def from_settings(cls, settings: Settings) -> HeartbeatStore:
        """A record missing for three heartbeat intervals is a worker gone."""
        folder = Path(settings.data_dir) / "heartbeats"
        return cls(settings.redis_url, ttl_s=3 * settings.worker.heartbeat_s, folder=folder)

    def _from_files(self) -> list[WorkerInfo]:
        records = (_read_record(p) for p in sorted(self.folder.glob("*.json")))
        return [r for r in records if r is not None]

    def _file(self, hostname: str) -> Path:
        return self.folder / f"{hostname.replace('/', '_')}.json"

    def write(self, info: WorkerInfo) -> None:
        if not self.redis_url:
            self.folder.mkdir(parents=True, exist_ok=True)
            target = self._file(info.hostname)
            scratch = target.with_suffix(".tmp")
            scratch.write_text(info.model_dump_json(), encoding="utf-8")
            os.replace(scratch, target)  # a reader sees the old record or the new one
            return
        with redis_client(self.redis_url) as client:
            ttl_ms = int(self.ttl_s * 1000)
            client.set(KEY_PREFIX + info.hostname, info.model_dump_json(), px=ttl_ms)

    def remove(self, hostname: str) -> None:
        if not self.redis_url:
            self._file(hostname).unlink(missing_ok=True)
            return
        with redis_client(self.redis_url) as client:
            client.delete(KEY_PREFIX + hostname)

    def read(self, now: dt.datetime | None = None) -> list[WorkerInfo]:
        now = now or utcnow()
        if not self.redis_url:
            limit = dt.timedelta(seconds=self.ttl_s)
            found = [w for w in self._from_files() if now - w.heartbeat_at <= limit]
        else:
            with redis_client(self.redis_url) as client:
                keys = sorted(client.scan_iter(match=KEY_PREFIX + "*", count=500))
                raw = client.mget(keys) if keys else []
            found = [WorkerInfo.model_validate(json.loads(r)) for r in raw if r]
        for worker in found:
            worker.heartbeat_age_s = round((now - worker.heartbeat_at).total_seconds(), 1)
        return sorted(found, key=lambda w: w.hostname)


def _read_record(path: Path) -> WorkerInfo | None:
    try:
        return WorkerInfo.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # removed meanwhile, or half a record from a crashed writer


class redis_client:
    """A short-lived Redis client: ops reads are rare, a pool is not worth keeping."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=5)

    def __enter__(self) -> Any:
        return self.client

    def __exit__(self, *_: object) -> None:
        self.client.close()


class Heartbeat:
    """A daemon thread in the worker that writes its record every `interval_s`."""

    def __init__(self, store: HeartbeatStore, describe: Any, *, interval_s: float) -> None:
        self.store = store
        self.describe = describe  # () -> WorkerInfo, called on every beat
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tiermem-heartbeat", daemon=True)
        self._hostname: str | None = None

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def beat(self) -> None:
        info = self.describe()
        self._hostname = info.hostname
        self.store.write(info)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # Redis away for a moment: the next beat tries again
                continue

    def stop(self) -> None:
        self._stop.set()
        if self._hostname:
            with contextlib.suppress(Exception):  # Redis away: the record expires anyway
                self.store.remove(self._hostname)
