"""End to end across processes: api → Redis → worker → Qdrant folder; and `tiermem serve`."""

from __future__ import annotations

import datetime as dt
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import func, update
from sqlmodel import Session, col, select

from shared.config import Settings
from shared.db.engine import make_engine
from shared.db.models import ChatSession, ExtractionRun, Fact, utcnow
from shared.ops.queues import utc
from shared.vectors import open_vector_store
from shared.vectors.folder_owner import read_owner
from shared.vectors.scope import MESSAGES_SUFFIX
from tests import factories as f
from tests import processes
from tests.factories import (
    ADMIN_KEY,
    APP_KEY,
    free_port,
    make_settings,
    start_process,
    tiermem_env,
    tiermem_serve,
    wait_for,
)
from tests.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.slow
TIERMEM = str(Path(sys.executable).with_name("tiermem"))
# Queue tests time turns, not what extraction asks about known facts (ADR 0032): one LLM
# call a turn, so a scripted latency of 1 s is a turn's 1 s, not up to five.
ONE_CALL_A_TURN = {"TIERMEM_EXTRACTION__ENDING_CHECKS_PER_TURN": "0"}
HEADERS = {"Authorization": f"Bearer {APP_KEY}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class Stack:
    """The pieces of a split deployment, each a real process."""

    tmp: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def settings(self) -> Settings:
        return Settings(
            **{"data_dir": self.tmp / "data", "database_url": self.env.get("TIERMEM_DATABASE_URL")}
        )

    def start(
        self, *args: str, name: str, extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        env = {**self.env, "TIERMEM_PORT": str(self.port), **(extra_env or {})}
        proc = start_process([TIERMEM, *args], env, self.tmp / f"{name}-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def start_api(self) -> None:
        # A port picked just before use: one picked early can be taken meanwhile (an
        # outgoing connection's ephemeral port), and the API would exit at bind.
        self.port = free_port()
        api = self.start("api", name="api")

        def up() -> bool:
            if api.poll() is not None:
                raise AssertionError(f"the API exited with {api.returncode}:\n{self.logs()}")
            return self._healthy()

        try:
            wait_for(up, timeout=60, what="the API to answer /healthz")
        except AssertionError:
            print(self.logs(), file=sys.stderr)
            raise

    def start_worker(
        self,
        *args: str,
        extra_env: dict[str, str] | None = None,
        queues: str = "extract",
        concurrency: int = 4,
    ) -> subprocess.Popen[bytes]:
        return self.start(
            "worker",
            "--queues",
            queues,
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "WARNING",
            *args,
            name="worker",
            extra_env=extra_env,
        )

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def post_turn(self, session_id: str, body: dict[str, Any]) -> str:
        r = httpx.post(f"{self.url}/v1/sessions/{session_id}/turns", json=body, headers=HEADERS)
        assert r.status_code == 202, r.text
        job_id: str = r.json()["job_id"]
        return job_id

    def job(self, job_id: str) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.url}/v1/jobs/{job_id}", headers=HEADERS).json()
        return body

    def wait_all_done(self, job_ids: list[str], timeout: float = 90) -> None:
        def done() -> bool:
            return all(self.job(j)["status"] == "done" for j in job_ids)

        try:
            wait_for(done, timeout=timeout, interval=0.3, what=f"{len(job_ids)} jobs")
        except AssertionError:
            print(self.logs(), file=sys.stderr)
            raise

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.tmp.glob("*.log"))
        )

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)


@pytest.fixture(name="stack_env")
def stack_env_fixture(tmp_path: Path, redis_url: str, scripted_llm: ScriptedLLM) -> dict[str, str]:
    return tiermem_env(
        {
            "TIERMEM_DATA_DIR": str(tmp_path / "data"),
            "TIERMEM_REDIS_URL": redis_url,
            "TIERMEM_LLM__BASE_URL": scripted_llm.base_url,
            "TIERMEM_LLM__TIMEOUT_S": "10",
            "TIERMEM_LOG_LEVEL": "WARNING",
        }
    )


@pytest.fixture(name="stack")
def stack_fixture(tmp_path: Path, stack_env: dict[str, str]) -> Iterator[Stack]:
    stack = Stack(tmp=tmp_path, env=stack_env)
    yield stack
    stack.stop_all()


def script_distinct_facts(llm: ScriptedLLM, n: int, user: str = "ana") -> None:
    for i in range(n):
        llm.script(
            f"note number {i}.",
            f.facts(
                f.general("Ana", f"Ana keeps note number {i} in her notebook."),
            ),
        )


def turn_text(i: int) -> str:
    return f"I wrote down note number {i}."


def qdrant_points_after_stop(stack: Stack) -> int:
    """Fact points (message collections for history search left out); the worker owned the
    folder, once it has stopped the test may open it."""
    store = open_vector_store(make_settings(stack.tmp))  # the stack's own folder and engine
    try:
        return sum(
            store.count(c) for c in store.list_collections() if not c.endswith(MESSAGES_SUFFIX)
        )
    finally:
        store.close()


def sql_counts(settings: Settings) -> tuple[int, int, dict[str, int]]:
    engine = make_engine(settings)
    try:
        with Session(engine) as s:
            active = s.exec(
                select(func.count()).select_from(Fact).where(col(Fact.valid_to).is_(None))
            ).one()
            dupes = s.exec(
                select(func.count()).select_from(
                    select(Fact.user_id, Fact.content_hash)
                    .where(col(Fact.valid_to).is_(None))
                    .group_by(Fact.user_id, Fact.content_hash)
                    .having(func.count() > 1)
                    .subquery()
                )
            ).one()
            statuses = dict(
                s.exec(
                    select(ExtractionRun.status, func.count()).group_by(ExtractionRun.status)
                ).all()
            )
        return int(active), int(dupes), statuses
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_http_to_redis_to_worker_process_to_qdrant(
    database: str, stack: Stack, scripted_llm: ScriptedLLM, request: pytest.FixtureRequest
) -> None:
    if database == "postgres":
        stack.env["TIERMEM_DATABASE_URL"] = request.getfixturevalue("pg_url")
    n = 12
    script_distinct_facts(scripted_llm, n)
    scripted_llm.script(
        "Berlin", f.facts(f.identity("Ana", "location", "Berlin", "Ana lives in Berlin."))
    )
    scripted_llm.script(
        "Lisbon", f.facts(f.identity("Ana", "location", "Lisbon", "Ana lives in Lisbon."))
    )
    stack.start_api()
    worker = stack.start_worker()

    jobs = [stack.post_turn("s1", f.turn("ana", turn_text(i))) for i in range(n)]
    jobs.append(stack.post_turn("s1", f.turn("ana", "I live in Berlin")))
    stack.wait_all_done(jobs)
    moved = stack.post_turn("s2", f.turn("ana", "I moved to Lisbon"))
    stack.wait_all_done([moved])
    assert stack.job(moved)["facts_superseded"] == 1

    # SQL is readable through the API while the worker owns the Qdrant folder...
    listed = httpx.get(f"{stack.url}/v1/users/ana/memories", headers=HEADERS).json()
    assert listed["count"] == n + 1
    # ...but the folder is not: the API says so instead of failing obscurely.
    search = httpx.post(
        f"{stack.url}/v1/users/ana/memories/search",
        headers=HEADERS,
        json={"query": "where does Ana live"},
    )
    assert search.status_code == 503, search.text
    assert "tiermem serve" in search.json()["error"]["message"]
    assert f"held by pid {worker.pid} on host" in search.json()["error"]["message"]

    stack.stop(worker)
    active, dupes, statuses = sql_counts(stack.settings)
    assert (active, dupes, statuses) == (n + 1, 0, {"done": n + 2})
    assert qdrant_points_after_stop(stack) == active  # superseded Berlin left Qdrant


def test_worker_killed_mid_batch_loses_and_duplicates_nothing(
    stack: Stack, scripted_llm: ScriptedLLM
) -> None:
    n = 24
    script_distinct_facts(scripted_llm, n)
    # So the kill lands while calls are in flight: 4 threads take 6 waves of 1 s, much
    # longer than one poll of the 24 jobs below even on a slow machine.
    scripted_llm.latency_s = 1.0
    stack.env.update(ONE_CALL_A_TURN)
    quick_recovery = {
        # Redis hands unacked messages of the dead worker back after this long...
        "TIERMEM_REDIS__VISIBILITY_TIMEOUT_S": "3",
        # ...and the sweeper resends runs left "running" by it.
        "TIERMEM_WORKER__SWEEP_RUNNING_AFTER_S": "4",
        "TIERMEM_WORKER__SWEEP_INTERVAL_S": "1",
        # ...and its heartbeat record is gone 1.5 s after the kill.
        "TIERMEM_WORKER__HEARTBEAT_S": "0.5",
    }
    stack.start_api()
    jobs = [stack.post_turn(f"s{i % 3}", f.turn("ana", turn_text(i))) for i in range(n)]
    first = stack.start_worker(extra_env=quick_recovery)
    wait_for(
        lambda: sum(stack.job(j)["status"] == "done" for j in jobs) >= 4,
        timeout=60,
        interval=0.1,
        what="a few runs to finish",
    )
    stack.stop(first, signal.SIGKILL)
    statuses = [stack.job(j)["status"] for j in jobs]
    assert statuses.count("done") < n, "the kill came too late to test anything"
    in_flight = {j for j, status in zip(jobs, statuses, strict=True) if status == "running"}
    assert in_flight

    # Ops shows the dead worker's runs as orphaned (not running) until they are sent again.
    def extract_queue() -> Any:
        snap = httpx.get(f"{stack.url}/v1/ops/queues", headers=ADMIN, timeout=10).json()
        extract = next(q for q in snap["queues"] if q["name"] == "extract")
        return extract if extract["orphaned"] and not extract["running"] else None

    orphaned = wait_for(extract_queue, timeout=20, interval=0.3, what="orphaned runs")
    assert {r["id"] for r in orphaned["orphaned_runs"]} == in_flight
    assert orphaned["orphaned"] == len(in_flight)
    assert "TIERMEM_REDIS__VISIBILITY_TIMEOUT_S" in orphaned["orphaned_note"]
    assert "TIERMEM_WORKER__SWEEP_RUNNING_AFTER_S" in orphaned["orphaned_note"]
    killed = f"tiermem-extract-{first.pid}@{socket.gethostname()}"  # its own node name
    assert {r["worker"] for r in orphaned["orphaned_runs"]} == {killed}
    status = processes.run(
        [TIERMEM, "ops", "status"], env={**stack.env, "COLUMNS": "250"},
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "orphaned runs: claimed by a worker whose heartbeat is gone" in status
    assert all(run_id in status for run_id in in_flight)

    # maintenance: beat's sweeps (the sweeper resends runs the dead worker left running)
    second = stack.start_worker("--beat", queues="extract,maintenance", extra_env=quick_recovery)
    stack.wait_all_done(jobs, timeout=120)
    stack.stop(second)
    active, dupes, _ = sql_counts(stack.settings)
    assert (active, dupes) == (n, 0)
    memories = httpx.get(
        f"{stack.url}/v1/users/ana/memories", headers=HEADERS, params={"limit": 100}
    ).json()["data"]
    assert all(m["mention_count"] == 1 for m in memories)  # a rerun never counts twice
    assert qdrant_points_after_stop(stack) == n


def test_second_worker_on_the_same_qdrant_folder_refuses_to_start(
    stack: Stack, scripted_llm: ScriptedLLM
) -> None:
    """Embedded Qdrant lets one process own a folder: a second worker on it stops before it
    takes a task (it could only fail them), naming the folder and the worker holding it."""
    n = 12
    script_distinct_facts(scripted_llm, n)
    scripted_llm.latency_s = 1.0  # a backlog in the broker the second worker could take
    stack.env.update(ONE_CALL_A_TURN)
    folder = str(Path(str(make_settings(stack.tmp).qdrant_path)).resolve())
    stack.start_api()
    first = stack.start_worker()

    def owned_by_first() -> bool:
        owner = read_owner(folder)
        return owner is not None and owner.pid == first.pid

    wait_for(owned_by_first, timeout=60, what="the first worker to own the folder")
    jobs = [stack.post_turn("s1", f.turn("ana", turn_text(i))) for i in range(n)]

    log = stack.tmp / f"worker-{len(stack.procs)}.log"
    started = time.monotonic()
    second = stack.start_worker()
    assert second.wait(timeout=60) != 0
    assert time.monotonic() - started < 30
    said = log.read_text()
    assert folder in said and f"pid {first.pid}" in said, said
    assert "tiermem worker --queues extract" in said  # the holder's command

    stack.wait_all_done(jobs)
    assert [stack.job(j)["attempts"] for j in jobs] == [1] * n  # none failed by the second
    assert first.poll() is None


def test_serve_refuses_a_folder_a_worker_holds(stack: Stack) -> None:
    folder = str(Path(str(make_settings(stack.tmp).qdrant_path)).resolve())
    worker = stack.start_worker()
    wait_for(lambda: read_owner(folder), timeout=60, what="the worker to own the folder")
    env = {k: v for k, v in stack.env.items() if k != "TIERMEM_REDIS_URL"}
    serve = processes.run(
        [TIERMEM, "serve", "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert serve.returncode == 1
    assert "tiermem serve cannot start" in serve.stderr
    assert folder in serve.stderr and f"pid {worker.pid}" in serve.stderr, serve.stderr


def test_flushed_broker_is_recovered_by_the_sweeper(
    stack: Stack, scripted_llm: ScriptedLLM, redis_url: str
) -> None:
    n = 10
    script_distinct_facts(scripted_llm, n)
    stack.start_api()
    jobs = [stack.post_turn("s1", f.turn("ana", turn_text(i))) for i in range(n)]
    redis.Redis.from_url(redis_url).flushdb()  # every queued message is gone
    assert all(stack.job(j)["status"] == "pending" for j in jobs)

    stack.start_worker(
        "--beat",
        queues="extract,maintenance",
        extra_env={
            "TIERMEM_WORKER__SWEEP_PENDING_AFTER_S": "0.5",
            "TIERMEM_WORKER__SWEEP_INTERVAL_S": "1",
        },
    )
    stack.wait_all_done(jobs)
    assert sql_counts(stack.settings)[0] == n


def test_the_outbox_sweep_does_not_wait_behind_the_extract_backlog(
    stack: Stack, scripted_llm: ScriptedLLM
) -> None:
    """Runs the broker lost (pending in SQL, in no queue) are re-sent within about one sweep
    interval while a backlog of slow extractions holds the worker: the sweep task has the
    maintenance queue to itself instead of waiting at the tail of the extract queue."""
    backlog, lost = 40, 3
    script_distinct_facts(scripted_llm, backlog + lost)
    scripted_llm.latency_s = 1.0  # 2 threads: about 20 s of backlog
    stack.env.update(ONE_CALL_A_TURN)
    stack.start_api()
    stack.start_worker(
        "--beat",
        queues="extract,maintenance",
        concurrency=2,
        extra_env={"TIERMEM_WORKER__SWEEP_INTERVAL_S": "1"},  # pending after: 120 s
    )
    jobs = [stack.post_turn("s1", f.turn("ana", turn_text(i))) for i in range(backlog)]
    # Taking tasks means its start-up sweep is behind it: from here only beat's sweeps count.
    wait_for(lambda: stack.job(jobs[0])["status"] != "pending", timeout=60, what="the worker")

    # Turns stored while the broker was away: pending in SQL, in no queue.
    transcript = stack.tmp / "lost.jsonl"
    transcript.write_text("".join(
        json.dumps({"user_id": "ana", "session_id": "s2", "role": "user", "speaker": "Ana",
                    "content": turn_text(backlog + i), "external_id": f"lost-{i}"}) + "\n"
        for i in range(lost)
    ))  # fmt: skip
    no_broker = {k: v for k, v in stack.env.items() if k != "TIERMEM_REDIS_URL"}
    processes.run([TIERMEM, "import", str(transcript)], env=no_broker, check=True, timeout=120)
    engine = make_engine(stack.settings)
    try:
        with Session(engine) as s:
            lost_ids = list(
                s.exec(select(ExtractionRun.id).where(col(ExtractionRun.session_id).in_(
                    select(ChatSession.id).where(ChatSession.external_id == "s2")
                ))).all()
            )  # fmt: skip
            assert len(lost_ids) == lost
            hour_ago = utcnow() - dt.timedelta(hours=1)  # lost in a flush an hour ago
            s.execute(
                update(ExtractionRun)
                .where(col(ExtractionRun.id).in_(lost_ids))
                .values(updated_at=hour_ago, enqueued_at=hour_ago)
            )
            s.commit()
        marked = time.monotonic()

        def resent() -> bool:
            with Session(engine) as s:
                sent = s.exec(
                    select(ExtractionRun.enqueued_at).where(col(ExtractionRun.id).in_(lost_ids))
                ).all()
            return all(t is not None and utc(t) > hour_ago for t in sent)

        wait_for(resent, timeout=10, interval=0.2, what="the sweep to re-send the lost runs")
        waited = time.monotonic() - marked
        unfinished = sum(stack.job(j)["status"] in ("pending", "running") for j in jobs)
        assert unfinished >= 10, f"the backlog was nearly gone ({unfinished} left) after {waited}s"
    finally:
        engine.dispose()
    stack.wait_all_done([*jobs, *lost_ids], timeout=120)


def test_batches_through_redis_and_a_worker_process(
    stack: Stack, scripted_llm: ScriptedLLM
) -> None:
    """Batching on in the split deployment (ADR 0024): three turns of one session are one
    call as soon as the third is stored; two of another are one call once that session has
    been quiet, its check a countdown task through Redis. The worker's four threads take the
    checks; each turn is claimed once."""
    quiet_s = 4.0
    stack.env.update(
        {"TIERMEM_EXTRACTION__BATCH_TURNS": "3", "TIERMEM_EXTRACTION__BATCH_QUIET_S": str(quiet_s)}
    )
    numbered = [
        {"turn": i + 1, **f.general("Ana", f"Ana keeps note number {i}.")} for i in range(3)
    ]
    scripted_llm.script("note number 2.", f.facts(*numbered))
    scripted_llm.script(
        "a cat called Mo",
        f.facts(
            {"turn": 1, **f.identity("Ana", "location", "Berlin", "Ana lives in Berlin.")},
            {"turn": 2, **f.pet("Ana", "Mo", "Ana has a cat called Mo.")},
        ),
    )
    stack.start_api()
    stack.start_worker()

    def ready() -> Any:  # its heartbeat: the worker takes tasks from here on
        return httpx.get(f"{stack.url}/v1/ops/workers", headers=ADMIN).json()

    wait_for(ready, timeout=60, what="a worker heartbeat")
    quiet = [
        stack.post_turn("s2", f.turn("ana", "I live in Berlin")),
        stack.post_turn("s2", f.turn("ana", "I have a cat called Mo")),
    ]
    full = [stack.post_turn("s1", f.turn("ana", turn_text(i))) for i in range(3)]
    stack.wait_all_done(full + quiet)
    jobs = [stack.job(j) for j in full + quiet]

    def waited(batch: list[dict[str, Any]]) -> float:
        """From the batch's last turn stored to its first turn claimed for extraction."""
        stored = max(dt.datetime.fromisoformat(j["created_at"]) for j in batch)
        return min(dt.datetime.fromisoformat(j["started_at"]) for j in batch) - stored

    assert waited(jobs[:3]).total_seconds() < quiet_s  # the third turn made it due
    assert waited(jobs[3:]).total_seconds() >= quiet_s - 0.1  # quiet for the set time
    assert [j["facts_added"] for j in jobs] == [1] * 5
    assert [j["batch_size"] for j in jobs] == [3, 3, 3, 2, 2]
    assert len({j["batch_id"] for j in jobs[:3]}) == len({j["batch_id"] for j in jobs[3:]}) == 1
    assert len(scripted_llm.chat_requests()) == 2
    assert sql_counts(stack.settings)[0] == 5


def test_serve_runs_everything_in_one_process_after_an_import(tmp_path: Path) -> None:
    """The README path: `tiermem import` (no servers), then `tiermem serve` extracts it with
    the offline extractor, and the search routes answer."""
    env = tiermem_env({"TIERMEM_DATA_DIR": str(tmp_path / "data"), "TIERMEM_LOG_LEVEL": "WARNING"})
    transcript = tmp_path / "old.jsonl"
    lines = [
        {
            "user_id": "bo",
            "session_id": "2023-05-08",
            "role": "user",
            "speaker": "Bo",
            "content": "I live in Lisbon and I work as a nurse.",
            "created_at": "2023-05-08T10:00:00Z",
            "external_id": "m1",
        },
        {
            "user_id": "bo",
            "session_id": "2023-05-08",
            "role": "assistant",
            "speaker": "Assistant",
            "content": "Thanks for telling me!",
            "external_id": "m2",
        },
    ]
    transcript.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    imported = processes.run(
        [TIERMEM, "import", str(transcript)], env=env, capture_output=True, text=True, timeout=120
    )
    assert imported.returncode == 0, imported.stderr
    assert "1 turns queued" in imported.stderr

    port = free_port()
    proc = start_process([TIERMEM, "serve", "--port", str(port)], env, tmp_path / "serve.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ok(f"{url}/healthz"), timeout=90, what="tiermem serve")
        memories = wait_for(
            lambda: httpx.get(f"{url}/v1/users/bo/memories", headers=HEADERS).json()["data"],
            timeout=30,
            what="the imported turn to be extracted",
        )
        assert {m["extractor"] for m in memories} == {"offline"}
        assert any("Lisbon" in m["content"] for m in memories)
        hits = httpx.post(
            f"{url}/v1/users/bo/memories/search",
            headers=HEADERS,
            json={"query": "What is Bo's job?", "k": 1},
        ).json()["data"]
        assert "nurse" in hits[0]["content"]
        job = httpx.post(
            f"{url}/v1/sessions/live/turns",
            headers=HEADERS,
            json=f.turn("bo", "I love jazz.", speaker="Bo"),
        ).json()["job_id"]
        wait_for(
            lambda: httpx.get(f"{url}/v1/jobs/{job}", headers=HEADERS).json()["status"] == "done",
            timeout=30,
            what="a live turn",
        )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode in (0, -signal.SIGINT), (tmp_path / "serve.log").read_text()[-3000:]


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_an_import_beside_a_running_serve_is_extracted_at_once(tmp_path: Path) -> None:
    """`tiermem import` cannot reach the in-process broker of a running `tiermem serve`: it
    stores the turns and wakes that process's sweeper, which sends them now, not after the
    sweep's two-minute threshold; the CLI says so."""
    env = tiermem_env({"TIERMEM_DATA_DIR": str(tmp_path / "data"), "TIERMEM_LOG_LEVEL": "WARNING"})
    port = free_port()
    proc = start_process([TIERMEM, "serve", "--port", str(port)], env, tmp_path / "serve.log")
    url = f"http://127.0.0.1:{port}"
    transcript = tmp_path / "later.jsonl"
    line = {"user_id": "cy", "session_id": "s1", "role": "user", "speaker": "Cy",
            "content": "I live in Porto.", "external_id": "c1"}  # fmt: skip
    transcript.write_text(json.dumps(line) + "\n")
    try:
        wait_for(lambda: _ok(f"{url}/healthz"), timeout=90, what="tiermem serve")
        imported = processes.run(
            [TIERMEM, "import", str(transcript)], env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert imported.returncode == 0, imported.stderr
        said = " ".join(imported.stderr.split())
        assert "1 turns handed to the running `tiermem serve`" in said, said
        assert f"pid {proc.pid}" in said
        memories = wait_for(
            lambda: httpx.get(f"{url}/v1/users/cy/memories", headers=HEADERS).json()["data"],
            timeout=20,  # the sweep's own threshold is 120 s
            what="the imported turn to be extracted",
        )
        assert any("Porto" in m["content"] for m in memories)

        # its workers are seen from another process too (no Redis: heartbeats in files),
        # and piped output is not cut to 80 columns
        status = processes.run(
            [TIERMEM, "ops", "status"], env=env, capture_output=True, text=True, timeout=120
        )
        assert status.returncode == 0, status.stderr
        assert "workers (0 live)" not in status.stdout, status.stdout
        assert f"tiermem-embedded-{proc.pid}@{socket.gethostname()}" in status.stdout, status.stdout
        assert max(len(row) for row in status.stdout.splitlines()) > 80
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_serves_two_workers_each_report_their_own_counts(tmp_path: Path) -> None:
    """`tiermem serve` runs its live worker and its replay worker in one process, where
    Celery counts tasks per process: each worker's record counts its own tasks, so a replay
    worker that took none says 0, not the live worker's count."""
    env = {"TIERMEM_WORKER__HEARTBEAT_S": "0.5", "TIERMEM_LOG_LEVEL": "WARNING"}
    with tiermem_serve(tmp_path, env) as url:
        jobs = [
            httpx.post(
                f"{url}/v1/sessions/s1/turns",
                headers=HEADERS,
                json={"user_id": "bo", "user_message": f"I keep note number {i} in a box."},
            ).json()["job_id"]
            for i in range(3)
        ]
        wait_for(
            lambda: all(
                httpx.get(f"{url}/v1/jobs/{j}", headers=HEADERS).json()["status"] == "done"
                for j in jobs
            ),
            timeout=60,
            what="the turns' extraction",
        )

        def after_the_turns() -> dict[str, Any]:
            workers = httpx.get(f"{url}/v1/ops/workers", headers=ADMIN).json()
            by_queues = {tuple(w["queues"]): w for w in workers}
            live = by_queues.get(("compress", "extract", "maintenance"))
            return by_queues if live and live["processed"] >= len(jobs) else {}

        workers = wait_for(after_the_turns, timeout=30, what="the live worker's count")
        replay = workers[("replay",)]
        assert replay["processed"] == 0 and replay["active"] == 0 and replay["reserved"] == 0
        assert replay["hostname"] != workers[("compress", "extract", "maintenance")]["hostname"]
