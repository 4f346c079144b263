"""Local embedding speed: load time, RSS, per-sentence latency and batch throughput."""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

BATCH_SIZES = (1, 8, 32, 64, 128)
RESULTS = Path(__file__).parent / "results" / "embeddings.md"

_NAMES = ("Priya", "Marco", "Lena", "Tomás", "Aiko", "Noah", "Zara", "Sam", "my sister", "my boss")
_PLACES = ("Berlin", "Lisbon", "Osaka", "Toronto", "the office", "my parents' place", "Nairobi")
_FOODS = ("ramen", "peanuts", "oat milk", "spicy food", "sushi", "gluten", "dark chocolate")
_TECH = ("Go", "Rust", "Python", "Kubernetes", "Postgres", "React", "Terraform", "Kafka")
_WHEN = ("tomorrow", "next Friday", "on March 3rd", "in two weeks", "after the holidays", "tonight")
_ACTIVITIES = ("running", "climbing", "the piano", "Spanish", "woodworking", "chess", "baking")
_SHORT = (
    "ok thanks",
    "yes please",
    "sounds good!",
    "nope",
    "can you shorten that?",
    "lol that's perfect",
    "wait, what?",
    "hmm not sure",
)
_TEMPLATES = (
    "I prefer {tech} over {tech2} for backend services.",
    "I'm allergic to {food}, so please never suggest recipes with it.",
    "Remind me to call {name} {when}.",
    "I moved to {place} last year and I'm still getting used to the weather.",
    "{name} is coming to visit {when}, any ideas for a dinner that avoids {food}?",
    "Can you explain how {tech} handles backpressure compared to {tech2}?",
    "I've been learning {activity} for about six months now and I practice most evenings.",
    "We decided to migrate the billing service from {tech} to {tech2} {when}.",
    "My daughter's birthday is {when} and she wants a cake shaped like a dinosaur.",
    "Honestly I hate {food}, it reminds me of the cafeteria at my first job in {place}.",
    "Could you draft a polite email to {name} saying I can't make the meeting {when}?",
    "Our team lead in {place} wants every service written in {tech} by the end of the quarter, "
    "which seems unrealistic given that half of us have only ever used {tech2} and the "
    "deadline overlaps with the on-call rotation.",
    "Last time we talked you suggested {activity}; I tried it {when} and loved it.",
    "What's a good way to structure a {tech} project so that tests stay fast?",
    "I work as a nurse in {place}, mostly night shifts, so I usually message you around 3am.",
    "Please stop recommending {food}, I told you I'm vegan now.",
    "Do you remember what {name} said about the apartment in {place}?",
    "I'm training for a half marathon {when}; my current long run is 14 km at a slow pace, "
    "and I'd like a plan that fits around {activity} on weekends.",
)


def chat_sentences(n: int, *, seed: int = 7) -> list[str]:
    """`n` varied chat messages: short acks, everyday facts, requests and a few long turns."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        if rng.random() < 0.12:
            out.append(rng.choice(_SHORT))
            continue
        tech, tech2 = rng.sample(_TECH, 2)
        sentence = rng.choice(_TEMPLATES).format(
            name=rng.choice(_NAMES),
            place=rng.choice(_PLACES),
            food=rng.choice(_FOODS),
            tech=tech,
            tech2=tech2,
            when=rng.choice(_WHEN),
            activity=rng.choice(_ACTIVITIES),
        )
        if rng.random() < 0.15:  # some turns carry two thoughts at once
            sentence += (
                " Also, "
                + rng.choice(_TEMPLATES)
                .format(
                    name=rng.choice(_NAMES),
                    place=rng.choice(_PLACES),
                    food=rng.choice(_FOODS),
                    tech=tech2,
                    tech2=tech,
                    when=rng.choice(_WHEN),
                    activity=rng.choice(_ACTIVITIES),
                )
                .lower()
            )
        out.append(sentence)
    return out


def rss_mb() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()  # not Linux: the peak is the best there is


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _timed(embed: Callable[[list[str]], object], texts: list[str]) -> float:
    started = time.perf_counter()
    embed(texts)
    return time.perf_counter() - started


def run(*, calls: int, threads: int, per_batch_size: int) -> str:
    load_before = os.getloadavg()[0]  # other work on the machine skews every number here
    rss_start = rss_mb()
    started = time.perf_counter()
    import onnxruntime
    import tokenizers

    from shared.config import EmbeddingSettings
    from shared.embeddings.local_onnx import OnnxMiniLMEmbedder, load_tokenizer

    import_s = time.perf_counter() - started
    # The raw embedder, not make_embedder(): a cache would answer repeats without the model.
    # Default settings otherwise, so the numbers are what a caller gets.
    embedder = OnnxMiniLMEmbedder(EmbeddingSettings(threads=threads))
    rss_loaded = rss_mb()
    sentences = chat_sentences(calls + per_batch_size)
    tokens = [len(e.ids) for e in load_tokenizer().encode_batch(sentences)]

    first_ms = _timed(embedder.embed, [sentences[0]]) * 1000
    for text in sentences[1:11]:  # warm-up: allocator and thread pools settle
        embedder.embed([text])

    latencies = [_timed(embedder.embed, [text]) * 1000 for text in sentences[:calls]]
    cuts = statistics.quantiles(latencies, n=100)
    p50, p95 = cuts[49], cuts[94]

    pool = sentences[calls:]  # not the sentences timed one by one above
    throughput: dict[int, float] = {}
    for size in BATCH_SIZES:
        batches = [pool[i : i + size] for i in range(0, per_batch_size, size)]
        embedder.embed(batches[0])
        elapsed = sum(_timed(embedder.embed, batch) for batch in batches)
        throughput[size] = sum(len(b) for b in batches) / elapsed

    # Workers embed from many threads at once; onnxruntime releases the GIL, so with one
    # intra-op thread per call, parallel callers are how the other cores get used.
    workers = os.cpu_count() or 1
    batches = [pool[i : i + 32] for i in range(0, per_batch_size, 32)]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as executor:
        list(executor.map(embedder.embed, batches))
    parallel = sum(len(b) for b in batches) / (time.perf_counter() - started)

    rows = [
        (
            "model",
            f"`{embedder.name}` ({embedder.model_file.stat().st_size / 1e6:.1f} MB int8 ONNX)",
        ),
        ("runtime", f"onnxruntime {onnxruntime.__version__}, tokenizers {tokenizers.__version__}"),
        (
            "machine",
            f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}",
        ),
        ("intra-op threads", str(threads)),
        ("import onnxruntime + tokenizers", f"{import_s * 1000:.0f} ms"),
        ("load (tokenizer + session)", f"{embedder.load_seconds * 1000:.0f} ms"),
        ("first call", f"{first_ms:.1f} ms"),
        ("sentence length", f"{statistics.mean(tokens):.0f} tokens mean, {max(tokens)} max"),
        (f"single sentence, p50 ({calls} calls)", f"{p50:.2f} ms"),
        (f"single sentence, p95 ({calls} calls)", f"{p95:.2f} ms"),
        *((f"throughput, {s} per call", f"{throughput[s]:.0f} sentences/s") for s in BATCH_SIZES),
        (f"throughput, 32 per call, {workers} threads at once", f"{parallel:.0f} sentences/s"),
        ("RSS before import", f"{rss_start:.0f} MB"),
        ("RSS after load", f"{rss_loaded:.0f} MB"),
        ("RSS peak (after 128 per call)", f"{peak_rss_mb():.0f} MB"),
    ]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## Local embeddings ({stamp})",
        "",
        "`python -m bench.bench_embeddings`: the raw local embedder (no cache) with default "
        f"settings, {per_batch_size} generated chat sentences per call size; one process, "
        f"load average {load_before:.2f} when it started.",
        "",
        "| measure | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in rows),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_embeddings", description=__doc__)
    parser.add_argument("--calls", type=int, default=300, help="single-sentence calls timed")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument(
        "--per-batch-size", type=int, default=1024, help="sentences embedded per batch size"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    table = run(calls=args.calls, threads=args.threads, per_batch_size=args.per_batch_size)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
