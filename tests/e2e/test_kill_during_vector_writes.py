"""kill -9 of `tiermem serve` while its worker threads write vectors loses nothing SQL holds.

A transcript is imported (runs pending in SQL), then `tiermem serve` extracts it with many
threads writing facts and messages into Qdrant Edge; it is killed with SIGKILL twice, at
different points, and started again each time. Recovery is the product's own: the engine
replays its WAL when the shard opens, and serve resends the runs the dead process left
pending or running when it starts. No `tiermem reindex` is run. At the end every active fact
and every indexable message in SQL has its point, found by a search, and no retired fact
keeps one.
"""

from __future__ import annotations

import json
import signal
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func
from sqlmodel import Session, col, select

from shared.config import Settings
from shared.db.engine import make_engine
from shared.db.models import ExtractionRun, Fact, Message, User
from shared.memory.history.indexing import is_indexable
from shared.runtime import Runtime
from tests.e2e.test_processes import HEADERS, free_port
from tests.factories import make_settings, start_process, tiermem_env, wait_for

pytestmark = pytest.mark.slow
TIERMEM = str(Path(sys.executable).with_name("tiermem"))
USERS, TURNS = 4, 40
CITIES = ["Lisbon", "Porto", "Madrid", "Berlin", "Paris", "Vienna", "Prague", "Oslo"]


def _turn(i: int) -> str:
    """New facts, a place that supersedes the last, and a taste said again (a merge)."""
    if i % 3 == 0:
        return f"I have a cat named Cat{i}."
    if i % 3 == 1:
        return f"I live in {CITIES[i % len(CITIES)]}."
    return "I like hiking in the Alps."


@pytest.fixture(name="settings")
def settings_fixture(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture(name="env")
def env_fixture(settings: Settings, tmp_path: Path) -> dict[str, str]:
    env = tiermem_env({"TIERMEM_DATA_DIR": str(settings.data_dir), "TIERMEM_LOG_LEVEL": "WARNING"})
    transcript = tmp_path / "turns.jsonl"
    transcript.write_text(
        "".join(
            json.dumps({"user_id": f"u{u}", "session_id": f"s{u}", "role": "user",
                        "speaker": f"U{u}", "content": _turn(i), "external_id": f"m{u}-{i}"})
            + "\n"
            for i in range(TURNS)
            for u in range(USERS)
        )
    )  # fmt: skip
    imported = start_process([TIERMEM, "import", str(transcript)], env, tmp_path / "import.log")
    assert imported.wait(timeout=120) == 0, (tmp_path / "import.log").read_text()
    return env


class Serve:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.proc = start_process(
            [TIERMEM, "serve", "--port", str(self.port), "--concurrency", "8"], env, log
        )

    def wait_healthy(self) -> None:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited:\n{self.log.read_text()[-3000:]}")
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).is_success
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=90, interval=0.1, what="tiermem serve")

    def stop(self, sig: int) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(timeout=60)


@pytest.fixture(name="serves")
def serves_fixture() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in started:
        if serve.proc.poll() is None:
            serve.proc.kill()
            serve.proc.wait()


def _statuses(settings: Settings) -> dict[str, int]:
    engine = make_engine(settings)
    try:
        with Session(engine) as s:
            rows = s.exec(
                select(ExtractionRun.status, func.count()).group_by(ExtractionRun.status)
            ).all()
        return {status: int(n) for status, n in rows}
    finally:
        engine.dispose()


def _wait_done(settings: Settings, runs: int) -> None:
    def done() -> bool:
        return _statuses(settings).get("done", 0) >= runs

    wait_for(done, timeout=120, interval=0.02, what=f"{runs} runs done")


def test_kill_9_during_vector_writes_loses_nothing_sql_holds(
    settings: Settings, env: dict[str, str], tmp_path: Path, serves: list[Serve]
) -> None:
    total = USERS * TURNS
    assert _statuses(settings) == {"pending": total}
    # Killed first early, with the shards just made, then half way through.
    for round_, kill_after in enumerate((total // 10, total // 2)):
        serve = Serve(env, tmp_path / f"serve-{round_}.log")
        serves.append(serve)
        serve.wait_healthy()
        _wait_done(settings, kill_after)
        serve.stop(signal.SIGKILL)
        at_kill = _statuses(settings)
        assert at_kill.get("done", 0) < total, f"the kill came too late to test anything: {at_kill}"
        assert at_kill.get("running"), f"no run was in flight: {at_kill}"

    last = Serve(env, tmp_path / "serve-last.log")
    serves.append(last)
    last.wait_healthy()
    _wait_done(settings, total)
    assert _statuses(settings) == {"done": total}
    memories = httpx.post(
        f"http://127.0.0.1:{last.port}/v1/users/u0/memories/search",
        headers=HEADERS, json={"query": "which cats does she have"},
    )  # fmt: skip
    assert memories.status_code == 200 and memories.json()["data"], memories.text
    last.stop(signal.SIGINT)
    logs = "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("serve-*.log")))
    assert "is damaged" not in logs

    _assert_every_sql_row_has_its_point(settings)


def _assert_every_sql_row_has_its_point(settings: Settings) -> None:
    runtime = Runtime(settings)
    try:
        with Session(runtime.engine) as s:
            users = s.exec(select(User)).all()
            facts = s.exec(select(Fact).where(col(Fact.valid_to).is_(None))).all()
            retired = s.exec(select(Fact.id).where(col(Fact.valid_to).is_not(None))).all()
            messages = [m for m in s.exec(select(Message)).all() if is_indexable(m)]
        assert len(users) == USERS and retired, "the turns should supersede some facts"
        facts_of, messages_of = defaultdict(list), defaultdict(list)
        for fact in facts:
            facts_of[fact.user_id].append(fact)
        for message in messages:
            messages_of[message.user_id].append(message.id)
        for user in users:
            mine = runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id)
            texts = runtime.messages_of(tenant_id=user.tenant_id, user_id=user.id)
            wanted = [f.id for f in facts_of[user.id]]
            assert [h.id for h in mine.retrieve(wanted)] == wanted
            assert mine.count() == len(wanted)  # so no retired fact kept its point
            assert not mine.retrieve(list(retired))
            assert {h.id for h in texts.retrieve(messages_of[user.id])} == set(messages_of[user.id])
            assert texts.count() == len(messages_of[user.id])
            vectors = runtime.embedder.embed([f.content for f in facts_of[user.id]])
            for fact, vector in zip(facts_of[user.id], vectors, strict=True):
                assert fact.id in {h.id for h in mine.search(vector, limit=3)}, fact.content
    finally:
        runtime.close()
