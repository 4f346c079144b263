"""Where Qdrant Edge keeps a shared shard's vectors and payloads, and what it costs: one
shard of N users × 20 points (384-d cosine, the user key as an is_tenant index, the
partitioned layout's HNSW setting), built once per placement, then reopened in a fresh
process that measures open → first filtered search, RSS (and its anonymous part), filtered
top-10 p50/p95 over random users, and recall@10 against exact float32 scoring.

    python -m bench.bench_edge_placement [--users 50000] [--queries 1000]
                                         [--placements disk,ram,earlier]

The engine alone, in-process (no HTTP, no embedding): bench_users measures the product.
Results: printed, and written to bench/results/edge_placement.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from bench._common import (
    RESULTS_DIR,
    command_line,
    load_average,
    machine_line,
    percentile,
    write_results,
)
from shared.ops.vectors import disk_bytes
from shared.vectors.base import SHARED_HNSW
from shared.vectors.edge_spec import ShardSpec

DIM, POINTS_PER_USER, BATCH_USERS = 384, 20, 50
# disk and ram: the shared shard tiermem makes under TIERMEM_QDRANT__VECTOR_MEMORY (float16);
# earlier: what versions before float16 made (float32, Edge's default placement, in RAM).
PLACEMENTS = ("disk", "ram", "earlier")


def shard_config(placement: str) -> qe.EdgeConfig:
    if placement == "earlier":
        vectors = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)
        return qe.EdgeConfig(vectors=vectors, hnsw_config=qe.HnswIndexConfig(**SHARED_HNSW))
    return ShardSpec(dim=DIM, shared=True).config("disk" if placement == "disk" else "ram")


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def user_key(user: int) -> str:
    return hashlib.sha256(f"u{user}".encode()).hexdigest()[:32]


def of_user(user: int) -> qe.Filter:
    return qe.Filter(
        must=[qe.FieldCondition(key="tm_user", match=qe.MatchValue(value=user_key(user)))]
    )


def build(folder: Path, placement: str, users: int) -> float:
    shard = qe.EdgeShard.create(str(folder), shard_config(placement))
    index = qe.KeywordIndexParams(is_tenant=True)
    shard.update(qe.UpdateOperation.create_field_index("tm_user", index))
    rng, started, point = np.random.default_rng(1), time.perf_counter(), 0
    for first in range(0, users, BATCH_USERS):
        vectors = unit_vectors(rng, BATCH_USERS * POINTS_PER_USER)
        points = []
        for j, vector in enumerate(vectors):
            user = first + j // POINTS_PER_USER
            payload = {"tm_user": user_key(user), "type": "preference", "slot": f"pref:{j}",
                       "content": f"Person{user} likes thing number {j} very much indeed",
                       "created_at": "2026-11-01T00:00:00+00:00"}  # fmt: skip
            points.append(qe.Point(point, vector.tolist(), payload))
            point += 1
        shard.update(qe.UpdateOperation.upsert_points(points))
    shard.flush()
    shard.close()
    return time.perf_counter() - started


def rss_mb() -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["RssAnon"].split()[0]) / 1024


def measure(folder: Path, users: int, queries: int) -> dict[str, Any]:
    """Run in a fresh process: nothing of the build is in this one's memory."""
    rng = np.random.default_rng(5)
    started = time.perf_counter()
    shard = qe.EdgeShard.load(str(folder))
    probe = unit_vectors(rng, 1)[0].tolist()
    first_user = of_user(int(rng.integers(users)))
    shard.query(qe.QueryRequest(query=qe.Query.Nearest(probe), limit=10, filter=first_user))
    first = time.perf_counter() - started
    asked, latencies = [], []
    for query in unit_vectors(rng, queries):
        user = int(rng.integers(users))
        t = time.perf_counter()
        hits = shard.query(qe.QueryRequest(query=qe.Query.Nearest(query.tolist()), limit=10,
                                           filter=of_user(user), with_payload=True))  # fmt: skip
        latencies.append((time.perf_counter() - t) * 1000)
        asked.append((user, query, {int(h.id) for h in hits}))
    rss, anon = rss_mb()
    shard.close()
    stored = unit_vectors(np.random.default_rng(1), users * POINTS_PER_USER)
    recall = []
    for user, query, got in asked:
        mine = stored[user * POINTS_PER_USER : (user + 1) * POINTS_PER_USER] @ query
        truth = set((np.argsort(-mine)[:10] + user * POINTS_PER_USER).tolist())
        recall.append(len(truth & got) / 10)
    return {"first_s": first, "rss_mb": rss, "anon_mb": anon,
            "p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
            "recall": float(np.mean(recall))}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--placements", default=",".join(PLACEMENTS))
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the fresh process's job
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(Path(args.measure), args.users, args.queries)))
        return
    rows = []
    for placement in args.placements.split(","):
        folder = Path(tempfile.mkdtemp(prefix=f"tiermem-placement-{placement}-"))
        try:
            built = build(folder / "shard", placement, args.users)
            disk = (disk_bytes(str(folder)) or 0) / 1e6
            fresh = subprocess.run(
                [sys.executable, "-m", "bench.bench_edge_placement", "--measure",
                 str(folder / "shard"), "--users", str(args.users), "--queries",
                 str(args.queries)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            m = json.loads(fresh.stdout.strip().splitlines()[-1])
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        rows.append(
            f"| {placement} | {built:.0f} s | {disk:,.0f} MB | {m['first_s']:.2f} s "
            f"| {m['rss_mb']:,.0f} MB ({m['anon_mb']:,.0f}) | {m['p50']:.2f} / {m['p95']:.2f} ms "
            f"| {m['recall']:.4f} |"
        )
        print(rows[-1], flush=True)
    points = args.users * POINTS_PER_USER
    text = "\n".join([
        "# Qdrant Edge placement (bench/bench_edge_placement.py)", "",
        f"{machine_line()}; load {load_average()}",
        f"`{command_line('bench.bench_edge_placement', argv)}`", "",
        f"One shard, {args.users:,} users × {POINTS_PER_USER} points ({points:,}), 384-d; "
        f"{args.queries:,} filtered top-10 searches for random users, in-process.", "",
        "| placement | build | disk | open → first search | RSS (anonymous) "
        "| top-10 p50 / p95 | recall@10 vs float32 |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ])  # fmt: skip
    write_results(RESULTS_DIR / "edge_placement.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
