"""mem0's search, run by bench.bench_context (latency over its facts) and bench.bench_recall
(recall over LoCoMo's messages) in the benchmark-only venv (bench/.venv: mem0ai, never a
tiermem dependency).

    MEM0_TELEMETRY=False MEM0_DIR=... bench/.venv/bin/python -m bench.mem0_runner IN OUT

IN is a folder the parent wrote, in one of two forms:
- bench_context: per scenario `<key>.npz` (user_ids, texts, created_at, vectors: the same
  facts and the same vectors tiermem stores) and `<key>.json` (the timed queries, each with
  its user). The first facts go through the real `add(infer=False)`, the rest straight into
  mem0's vector store with the payload keys that add() wrote (checked).
- bench_recall: `recall.json`, LoCoMo's messages (one mem0 user per conversation) and its
  questions. Every message goes through the real `Memory.add([{role, content}], user_id=,
  infer=False, metadata={"external_id": dia_id, "timestamp": session date})`, stored as
  mem0's own LoCoMo evaluation stores a turn (evaluation/src/memzero/add.py in mem0's
  repository): the content prefixed with the speaker's name ("Caroline: …"), speaker_a as
  user, speaker_b as assistant, the session date as metadata. The report then holds each
  question's hits as their metadata external_id, in rank order.
mem0 runs with its embedded Qdrant on a folder (`path=`), one collection for all users (its
design: a payload filter on user_id), and our local ONNX MiniLM as its embedder (an
`EmbeddingBase` subclass wrapping the very class tiermem uses, no cache), so both sides embed
each query with the same model on the same thread count. Its search is
`Memory.search(query, filters={"user_id": …}, top_k=10)` with its defaults (threshold 0.1);
mem0's keyword (BM25) and entity scoring join in only where its optional fastembed and spaCy
models load (`search_signals` in the report says which did).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if os.environ.get("MEM0_TELEMETRY") != "False" or not os.environ.get("MEM0_DIR"):
    sys.exit("set MEM0_TELEMETRY=False and MEM0_DIR before running the mem0 runner")

import numpy as np  # noqa: E402
from mem0 import Memory  # noqa: E402
from mem0.embeddings.base import EmbeddingBase  # noqa: E402
from mem0.memory.main import _build_filters_and_metadata  # noqa: E402
from mem0.utils.lemmatization import lemmatize_for_bm25  # noqa: E402

from shared.config import EmbeddingSettings  # noqa: E402
from shared.embeddings.local_onnx import OnnxMiniLMEmbedder  # noqa: E402

K = 10
WARMUP = 20
EXTERNAL_ID = "external_id"  # the metadata key of a message's id in its source (dia_id)
RECALL_INPUT = "recall.json"


class OnnxMiniLM(EmbeddingBase):
    """mem0's embedder interface over tiermem's OnnxMiniLMEmbedder (int8 all-MiniLM-L6-v2)."""

    def __init__(self, model: OnnxMiniLMEmbedder) -> None:
        super().__init__()
        self.model = model
        self.seconds = 0.0
        self.calls = 0

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        started = time.perf_counter()
        vector = self.model.embed([text])[0]
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return vector.tolist()

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        return [row.tolist() for row in self.model.embed(texts)]


def make_memory(
    folder: Path, model: OnnxMiniLMEmbedder, llm: dict[str, Any] | None = None
) -> tuple[Memory, OnnxMiniLM]:
    """`llm`: mem0's LLM config, for add(infer=True) (bench.bench_llm_cost); by default one
    that is never called."""
    memory = Memory.from_config(
        {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "mem0",
                    "path": str(folder / "qdrant"),
                    "embedding_model_dims": 384,
                },
            },
            # Constructed but never called: add(infer=False) and search make no LLM call, and the
            # openai embedder is replaced below before any use (its client does no I/O at init).
            "embedder": {
                "provider": "openai",
                "config": {"api_key": "unused", "embedding_dims": 384},
            },
            "llm": llm or {"provider": "openai", "config": {"api_key": "unused"}},
            "history_db_path": str(folder / "history.db"),
        }
    )
    embedder = OnnxMiniLM(model)
    memory.embedding_model = embedder
    return memory, embedder


def payload(user_id: str, text: str, created_at: str) -> dict[str, Any]:
    """What add(infer=False) stores for one user message (Memory._create_memory)."""
    metadata, _ = _build_filters_and_metadata(user_id=user_id)
    metadata["role"] = "user"
    metadata["data"] = text
    import hashlib

    metadata["hash"] = hashlib.md5(text.encode()).hexdigest()
    metadata["created_at"] = created_at
    metadata["updated_at"] = created_at
    metadata["text_lemmatized"] = lemmatize_for_bm25(text)
    return metadata


def load(memory: Memory, data: Any) -> dict[str, Any]:
    """The first three facts through the real add(infer=False) (to check that the direct
    path writes the same payload keys), the rest straight into mem0's vector store."""
    user_ids, texts, created = data["user_ids"], data["texts"], data["created_at"]
    vectors = data["vectors"]
    started = time.perf_counter()
    real_ids = []
    for i in range(3):
        out = memory.add(
            [{"role": "user", "content": str(texts[i])}], user_id=str(user_ids[i]), infer=False
        )
        real_ids.append(out["results"][0]["id"])
    real = memory.vector_store.client.retrieve("mem0", ids=real_ids, with_payload=True)
    real_keys = sorted(real[0].payload or {})
    direct_keys = sorted(payload(str(user_ids[0]), str(texts[0]), str(created[0])))
    if real_keys != direct_keys:
        raise SystemExit(f"payload mismatch: add() wrote {real_keys}, direct {direct_keys}")
    for start in range(3, len(texts), 1000):
        stop = min(start + 1000, len(texts))
        memory.vector_store.insert(
            vectors=[v.tolist() for v in vectors[start:stop]],
            payloads=[
                payload(str(user_ids[i]), str(texts[i]), str(created[i]))
                for i in range(start, stop)
            ],
            ids=[str(uuid.uuid4()) for _ in range(start, stop)],
        )
    count = memory.vector_store.client.count("mem0", exact=True).count
    return {"points": count, "load_s": time.perf_counter() - started, "payload_keys": real_keys}


def add_messages(memory: Memory, messages: list[dict[str, str]]) -> dict[str, Any]:
    """Every LoCoMo turn through the real add(infer=False), one call per turn (its metadata
    is per call), stored as mem0's LoCoMo evaluation stores it: "<speaker>: <text>"."""
    started = time.perf_counter()
    for m in messages:
        memory.add(
            [{"role": m["role"], "content": f"{m['speaker']}: {m['text']}"}],
            user_id=m["user_id"],
            infer=False,
            metadata={EXTERNAL_ID: m["external_id"], "timestamp": m["timestamp"]},
        )
    (point,), _ = memory.vector_store.client.scroll("mem0", limit=1, with_payload=True)
    return {
        "points": memory.vector_store.client.count("mem0", exact=True).count,
        "load_s": time.perf_counter() - started,
        "payload_keys": sorted(point.payload or {}),
    }


def search_signals(memory: Memory) -> list[str]:
    """What mem0's search scores by here: semantic always; BM25 and entity boosts only where
    their optional models load (fastembed's Qdrant/bm25, spaCy's en_core_web_sm)."""
    from mem0.utils.spacy_models import get_nlp_full

    signals = ["semantic"]
    if memory.vector_store._has_bm25_slot and memory.vector_store._get_bm25_encoder():
        signals.append("bm25")
    if get_nlp_full() is not None:
        signals.append("entity")
    return signals


def measure(
    memory: Memory,
    embedder: OnnxMiniLM,
    queries: list[dict[str, str]],
    warmup: list[dict[str, str]],
) -> dict[str, Any]:
    store = memory.vector_store
    inner_search = store.search
    search_s: list[float] = []

    def timed_search(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner_search(*args, **kwargs)
        finally:
            search_s.append(time.perf_counter() - started)

    store.search = timed_search  # type: ignore[method-assign]
    for q in warmup:
        memory.search(q["query"], filters={"user_id": q["user_id"]}, top_k=K)
    search_s.clear()
    latencies, cpu, embed_s, results, found = [], [], [], [], []
    for q in queries:
        before = embedder.seconds
        cpu_start, started = time.thread_time(), time.perf_counter()
        out = memory.search(q["query"], filters={"user_id": q["user_id"]}, top_k=K)
        latencies.append((time.perf_counter() - started) * 1000)
        cpu.append((time.thread_time() - cpu_start) * 1000)
        embed_s.append((embedder.seconds - before) * 1000)
        hits = out["results"]
        if any(h.get("user_id") != q["user_id"] for h in hits):
            raise SystemExit("mem0 returned another user's memory")
        results.append(len(hits))
        found.append([(h.get("metadata") or {}).get(EXTERNAL_ID) for h in hits])
    return {
        "latencies_ms": latencies,
        "cpu_ms": cpu,
        "embed_ms": embed_s,
        "vector_search_ms": [s * 1000 for s in search_s],
        "results": results,
        "hits": found,
    }


@contextlib.contextmanager
def unsynced_qdrant_files() -> Iterator[None]:
    """While loading only, as on tiermem's side (bench.context_world): local Qdrant commits
    each point with an fsync; without it the same rows are written, and the store is closed
    and reopened with the defaults before it is searched."""
    from qdrant_client.local import persistence

    original = persistence.CollectionPersistence._ensure_table

    def ensure_table(self: Any) -> None:
        self.storage.execute("PRAGMA synchronous=OFF")
        self.storage.execute("PRAGMA journal_mode=MEMORY")
        original(self)

    persistence.CollectionPersistence._ensure_table = ensure_table  # type: ignore[method-assign]
    try:
        yield
    finally:
        persistence.CollectionPersistence._ensure_table = original  # type: ignore[method-assign]


def opened(
    folder: Path, model: OnnxMiniLMEmbedder, fill: Callable[[Memory], dict[str, Any]]
) -> tuple[Memory, OnnxMiniLM, dict[str, Any]]:
    """A mem0 store on `folder` filled by `fill` (unsynced), closed, and reopened from disk with
    the defaults for searching."""
    with unsynced_qdrant_files():
        memory, _ = make_memory(folder, model)
        loaded = fill(memory)
        memory.vector_store.client.close()
    memory, embedder = make_memory(folder, model)
    return memory, embedder, loaded


def main(argv: list[str]) -> None:
    src, out = Path(argv[0]), Path(argv[1])
    import mem0

    model = OnnxMiniLMEmbedder(EmbeddingSettings())
    report: dict[str, Any] = {
        "mem0_version": getattr(mem0, "__version__", "?"),
        "k": K,
        "scenarios": {},
    }
    if (src / RECALL_INPUT).exists():
        recall = json.loads((src / RECALL_INPUT).read_text())
        print(
            f"mem0 recall: adding {len(recall['messages'])} messages", file=sys.stderr, flush=True
        )
        memory, embedder, loaded = opened(
            src / "mem0-recall", model, functools.partial(add_messages, messages=recall["messages"])
        )
        print(f"mem0 recall: searching {len(recall['queries'])}", file=sys.stderr, flush=True)
        result = measure(memory, embedder, recall["queries"], recall["warmup"])
        report["recall"] = {**loaded, **result, "search_signals": search_signals(memory)}
        memory.vector_store.client.close()
        out.write_text(json.dumps(report))
        return
    for npz in sorted(src.glob("*.npz")):
        key = npz.stem
        queries = json.loads(npz.with_suffix(".json").read_text())
        print(f"mem0 {key}: loading", file=sys.stderr, flush=True)
        fill = functools.partial(load, data=np.load(npz, allow_pickle=False))
        memory, embedder, loaded = opened(src / f"mem0-{key}", model, fill)
        print(
            f"mem0 {key}: {loaded['points']} points; searching {len(queries['timed'])}",
            file=sys.stderr,
            flush=True,
        )
        result = measure(memory, embedder, queries["timed"], queries["warmup"])
        report["scenarios"][key] = {**loaded, **result}
        memory.vector_store.client.close()
        out.write_text(json.dumps(report))  # after each scenario: a partial result survives


if __name__ == "__main__":
    main(sys.argv[1:])
