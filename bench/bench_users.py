"""How tiermem grows with its users: N users × 20 memories and 20 messages each, loaded
through the product's own code (messages by ingest, fact rows by the writer's row builder,
vectors through Runtime.facts_of / messages_of), then a real `tiermem serve` restarted on it.

    python -m bench.bench_users [--users 1000,10000] [--variants edge-partitioned,edge-per_user]
                                [--queries 300] [--keep | --reuse FOLDER]

Per size and variant: load time, disk (real blocks), restart → first memory search answered,
the serve process's RSS, and memory-search and context p50/p95 over HTTP for random users.
Vectors are random unit vectors: the bench measures the engine and the API, not the model
(queries are embedded by the real model, so latency is real; relevance is not measured here).
The engine is Qdrant Edge; the variant names the layout. (qdrant-client's local mode, the
`local-per_user` variant of docs/benchmarks.md, was removed from tiermem after that run.)

Results: printed, and written to bench/results/users.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import update
from sqlmodel import Session, col

from bench._common import (
    RESULTS_DIR,
    Service,
    child_env,
    command_line,
    free_port,
    load_average,
    machine_line,
    percentile,
    tiermem_command,
    write_results,
)
from bench.context_data import fact_stream
from shared.config import Settings
from shared.db.migrate import upgrade_to_head
from shared.db.models import ExtractionRun, Message
from shared.memory import writer
from shared.ops.vectors import disk_bytes
from shared.records.ingest import NewMessage, ingest_messages
from shared.records.tenancy import ensure_dev_tenant, get_tenant_by_name
from shared.runtime import Runtime
from shared.vectors import VectorPoint

FACTS, MESSAGES, DIM = 20, 20, 384
# Each variant is the TIERMEM_QDRANT__* settings it runs with.
VARIANTS: dict[str, dict[str, str]] = {
    "edge-partitioned": {"layout": "partitioned"},  # vector_memory=disk, the default
    "edge-partitioned-ram": {"layout": "partitioned", "vector_memory": "ram"},
    "edge-per_user": {"layout": "per_user"},
}
QUERIES = ["where does she live", "what does he do for work", "favourite music", "any pets",
           "plans for next year", "who is her sister"]  # fmt: skip
HEADERS = {"Authorization": "Bearer dev-app-key"}


def env_for(folder: Path, qdrant: dict[str, str], port: int | None = None) -> dict[str, str]:
    env = {"TIERMEM_DATA_DIR": str(folder), "TIERMEM_LOG_LEVEL": "WARNING"}
    env.update({f"TIERMEM_QDRANT__{key.upper()}": value for key, value in qdrant.items()})
    if port is not None:
        env["TIERMEM_PORT"] = str(port)
    return env


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def load(folder: Path, qdrant: dict[str, str], users: int, seed: int = 7) -> float:
    """Store `users` users; returns seconds."""
    settings = Settings(_env_file=None, data_dir=folder, qdrant=qdrant)
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    rng, vrng = random.Random(seed), np.random.default_rng(seed)
    now = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    started = time.perf_counter()
    with Session(runtime.engine, expire_on_commit=False) as session:
        ensure_dev_tenant(session=session, settings=settings)
        tenant = get_tenant_by_name(session=session, name=settings.auth.dev_tenant)
        assert tenant is not None
        for i in range(users):
            external = f"u{i:06d}"
            said = [now - dt.timedelta(minutes=MESSAGES - j) for j in range(MESSAGES)]
            texts = [
                f"Message {j} of {external}: about work, music and plans." for j in range(MESSAGES)
            ]
            result = ingest_messages(
                session=session, settings=settings, tenant_id=tenant.id, user_external_id=external,
                session_external_id=f"{external}-s", extractor="offline",
                messages=[NewMessage("user" if j % 2 == 0 else "assistant", texts[j],  # type: ignore[arg-type]
                                     created_at=said[j]) for j in range(MESSAGES)],
            )  # fmt: skip
            first_user = next(m for m in result.messages if m.role == "user")
            provenance = writer.Provenance(
                tenant_id=tenant.id, user_id=result.user_id, chat_id=result.chat_id,
                message_ids=(first_user.id,), seen_at=said[0], extractor="offline",
                extractor_version="bench", model=None,
            )  # fmt: skip
            stream = fact_stream(rng, f"Person{i}")
            rows = [
                writer._new_row(next(stream).fact, provenance) for _ in range(FACTS)
            ]  # the writer's row
            session.add_all(rows)
            session.flush()
            session.execute(
                update(ExtractionRun)
                .where(col(ExtractionRun.user_id) == result.user_id)
                .values(status="done")
            )
            session.execute(update(Message).where(col(Message.user_id) == result.user_id)
                            .values(extraction_status="done"))  # fmt: skip
            fact_vectors, message_vectors = unit_vectors(vrng, FACTS), unit_vectors(vrng, MESSAGES)
            runtime.facts_of(tenant_id=tenant.id, user_id=result.user_id).upsert(
                [
                    VectorPoint(r.id, v, writer.point_payload(r))
                    for r, v in zip(rows, fact_vectors, strict=True)
                ]
            )
            runtime.messages_of(tenant_id=tenant.id, user_id=result.user_id).upsert(
                [VectorPoint(m.id, v, {"session_id": result.chat_id, "role": m.role})
                 for m, v in zip(result.messages, message_vectors, strict=True)]
            )  # fmt: skip
            if i % 200 == 199:
                session.commit()
                print(f"  loaded {i + 1} users ({time.perf_counter() - started:.0f} s)", flush=True)
        session.commit()
    runtime.close()
    return time.perf_counter() - started


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident, of which anonymous) MB: the rest is file pages the kernel can drop."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["RssAnon"].split()[0]) / 1024


def serve_and_measure(
    folder: Path, qdrant: dict[str, str], users: int, queries: int
) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    rng = random.Random(11)
    env = child_env(env_for(folder, qdrant, port))
    service = Service("serve", [*tiermem_command(), "serve"], env,
                      folder / "serve.log")  # fmt: skip
    started = time.perf_counter()
    with service, httpx.Client(base_url=url, headers=HEADERS, timeout=30) as client:
        first = None
        while first is None:
            service.check_alive()
            try:
                r = client.post(
                    f"/v1/users/u{rng.randrange(users):06d}/memories/search", json={"query": "work"}
                )
                if r.status_code == 200:
                    first = time.perf_counter() - started
            except httpx.HTTPError:
                time.sleep(0.1)
            if time.perf_counter() - started > 600:
                raise TimeoutError(service.log_tail())
        search, context = [], []
        for n in range(queries):
            user, query = f"u{rng.randrange(users):06d}", QUERIES[n % len(QUERIES)] + f" {n}"
            t = time.perf_counter()
            r = client.post(f"/v1/users/{user}/memories/search", json={"query": query, "k": 10})
            search.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200 and r.json()["count"] == 10, r.text
            t = time.perf_counter()
            r = client.get(
                f"/v1/sessions/{user}-s/context", params={"query": query, "budget_tokens": 2000}
            )
            context.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200, r.text
        rss = rss_mb(service.pid)
    return {"restart_s": first, "rss_mb": rss,
            "search_p50": percentile(search, 50), "search_p95": percentile(search, 95),
            "context_p50": percentile(context, 50),
            "context_p95": percentile(context, 95)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="1000,10000")
    parser.add_argument("--variants", default="edge-partitioned")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the data folders")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="measure a folder a --keep run loaded (one size and variant; load time not shown)",
    )
    args = parser.parse_args(argv)
    rows = []
    for users in (int(u) for u in args.users.split(",")):
        for variant in args.variants.split(","):
            qdrant = VARIANTS[variant]
            folder = args.reuse or Path(
                tempfile.mkdtemp(prefix=f"tiermem-users-{variant}-{users}-")
            )
            print(f"{variant}, {users:,} users → {folder}", flush=True)
            try:
                loaded = "reused" if args.reuse else f"{load(folder, qdrant, users):.0f} s"
                disk = (disk_bytes(str(folder)) or 0) / 1e6
                m = serve_and_measure(folder, qdrant, users, args.queries)
            finally:
                if not (args.keep or args.reuse):
                    shutil.rmtree(folder, ignore_errors=True)
            rows.append(
                f"| {users:,} | {variant} | {loaded} | {disk:.0f} MB "
                f"| {m['restart_s']:.1f} s "
                f"| {m['rss_mb'][0]:.0f} MB ({m['rss_mb'][1]:.0f}) "
                f"| {m['search_p50']:.1f} / {m['search_p95']:.1f} ms "
                f"| {m['context_p50']:.1f} / {m['context_p95']:.1f} ms |"
            )
            print(rows[-1], flush=True)
    text = "\n".join([
        "# Users growth (bench/bench_users.py)", "",
        f"{machine_line()}; load {load_average()}",
        f"`{command_line('bench.bench_users', argv)}`", "",
        f"Each user: {FACTS} memories and {MESSAGES} messages; random unit vectors; "
        f"{args.queries} memory searches and context builds (2,000 tokens) over HTTP "
        "for random users.",
        "",
        "| users | engine-layout | load | disk | restart → first search | serve RSS (anonymous) "
        "| memory search p50 / p95 | context p50 / p95 |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ])  # fmt: skip
    write_results(RESULTS_DIR / "users.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
