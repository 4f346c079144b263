"""Message search on LoCoMo: the product's history search — the engine's dense and BM25 sparse
lists fused in Python (ADR 0013), and its SQL path (SQL full-text + dense, what answers
when the engine cannot) — against Qdrant Edge shards queried directly (dense + BM25 sparse
prefetches fused by RRF in the engine, and variants), same messages, same embeddings, same
candidate depth and RRF k.

    python -m bench.bench_hybrid [--data /work/shared/data/locomo-dev/locomo-dev.json]
                                 [--sql sqlite,postgres] [--rounds 3] [--bm25-avg-len 256]
                                 [--pad-users 0]

--pad-users adds that many other users to the tenant (20 generated messages each, random
vectors; never scored): what a tenant's other messages cost the searches and their ranking.

The dataset (CC BY-NC, never copied into this repository) is read where it lies; its README
sets the scoring: each conversation is one user, each LoCoMo session one session, each turn a
message (speaker_a as user, speaker_b as assistant, dia_id as external_id, the session date
as created_at); a question is found at k when one of its evidence turns is among the first k
hits (any@k), all of them (all@k). Only aggregate numbers are written.

Per SQL backend: messages are stored by the product's ingest and written into the product's
message collection by the worker's own `index_messages` (embedded Edge, partitioned layout:
dense and BM25 sparse vectors), then searched by `search_history` (what GET
/v1/users/{u}/history/search calls), by its SQL path (`search_history_in_sql`) and by
their halves. The Edge shards are built beside it from the same rows and the very vectors
the product stored: one point per message, the dense vector (small talk has none, as in
the product) and a BM25 sparse vector (Edge's Bm25, IDF modifier) or a BM25-scored payload
text index. Every method ends with the hits' rows read from SQL, as an API answer needs
them.
Latency is in-process, query embedding excluded (the same for every method, reported once);
methods take turns per question, so machine noise falls on all alike: compare as ratios.

Results: printed, and written to bench/results/hybrid.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import shutil
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe
from sqlalchemy import select as sa_select
from sqlalchemy import text
from sqlmodel import Session, col

from bench._common import (
    RESULTS_DIR,
    assistant_replies,
    command_line,
    load_average,
    machine_line,
    percentile,
    postgres_database,
    user_messages,
    write_results,
)
from bench.locomo import CATEGORIES, DATA, Dataset, Question, found_all, found_any, load_dataset
from shared.config import Settings
from shared.db.migrate import upgrade_to_head
from shared.db.models import Message, User
from shared.embeddings import Embedder
from shared.errors import Unavailable
from shared.flows.extract_turn import index_user_messages
from shared.memory.history.fulltext import keyword_search, rebuild_keyword_index
from shared.memory.history.indexing import index_text, is_indexable
from shared.memory.history.search import (
    _HIT_ROWS,
    candidate_depth,
    search_history,
    search_history_in_sql,
)
from shared.ops.vectors import disk_bytes
from shared.records.ingest import NewMessage, ingest_messages
from shared.records.tenancy import ensure_dev_tenant, get_tenant_by_name
from shared.runtime import Runtime
from shared.vectors import Vector, VectorPoint
from shared.vectors.scope import USER_FIELD, UserVectors

log = logging.getLogger(__name__)

K = 10
DENSE, SPARSE, TEXT = "dense", "bm25", "text"
BATCH = 256
PAD_MESSAGES = 20
RRF_K = Settings(_env_file=None).context.rrf_k  # the product's fusion constant


# -- the product, loaded through its own code -----------------------------------------------


class TimedEmbedder:
    """Adds up the seconds the product's embedder spends, to tell embedding from indexing."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.dim, self.seconds = inner, inner.name, inner.dim, 0.0

    def embed(self, texts: Sequence[str]) -> Any:
        started = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - started


@dataclass
class Product:
    runtime: Runtime
    tenant_id: str
    users: dict[str, User]  # sample_id → row
    ingest_s: float
    embed_s: float
    vector_index_s: float  # index_messages minus its embedding
    pad_vectors: dict[str, np.ndarray] = field(default_factory=dict)  # message id → vector
    pad_s: float = 0.0


def load_product(folder: Path, database_url: str | None, data: Dataset, pad_users: int) -> Product:
    settings = Settings(
        _env_file=None,
        data_dir=folder,
        database_url=database_url,
        qdrant={"engine": "edge", "layout": "partitioned"},
    )
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    timed = TimedEmbedder(runtime.embedder.inner)  # type: ignore[attr-defined]
    runtime.embedder.inner = timed  # type: ignore[attr-defined]
    stored: list[tuple[str, list[str]]] = []  # (user id, message ids) per session
    user_ids: dict[str, str] = {}  # sample_id → user id
    started = time.perf_counter()
    with Session(runtime.engine, expire_on_commit=False) as session:
        ensure_dev_tenant(session=session, settings=settings)
        tenant = get_tenant_by_name(session=session, name=settings.auth.dev_tenant)
        assert tenant is not None
        for (user, number), turns in data.sessions.items():
            result = ingest_messages(
                session=session,
                settings=settings,
                tenant_id=tenant.id,
                user_external_id=user,
                session_external_id=f"{user}-s{number}",
                extractor="offline",
                messages=[
                    NewMessage(t.role, t.text, t.speaker, t.dia_id, t.said_at)  # type: ignore[arg-type]
                    for t in turns
                ],
            )
            session.commit()
            stored.append((result.user_id, [m.id for m in result.messages]))
            user_ids[user] = result.user_id
        users = {u: session.get_one(User, uid) for u, uid in user_ids.items()}
    ingest_s = time.perf_counter() - started
    started = time.perf_counter()
    for user_id, message_ids in stored:  # a call per session (the worker: one per turn)
        index_user_messages(
            runtime=runtime, tenant_id=tenant.id, user_id=user_id, message_ids=message_ids
        )
    index_s = time.perf_counter() - started
    product = Product(runtime, tenant.id, users, ingest_s, timed.seconds, index_s - timed.seconds)
    if pad_users:
        started = time.perf_counter()
        pad(product, pad_users)
        product.pad_s = time.perf_counter() - started
    return product


def pad(product: Product, users: int) -> None:
    """Other users in the same tenant, PAD_MESSAGES generated chat messages each, stored by
    ingest with random unit vectors (their relevance is not measured, only what their
    postings and points cost the LoCoMo users' searches)."""
    runtime, rng = product.runtime, np.random.default_rng(5)
    said = dt.datetime(2023, 6, 1, tzinfo=dt.UTC)
    asked = user_messages(users * PAD_MESSAGES // 2, seed=3)
    replies = assistant_replies(users * PAD_MESSAGES // 2, seed=4)
    with Session(runtime.engine, expire_on_commit=False) as session:
        for i in range(users):
            half = slice(i * PAD_MESSAGES // 2, (i + 1) * PAD_MESSAGES // 2)
            texts = [t for pair in zip(asked[half], replies[half], strict=True) for t in pair]
            result = ingest_messages(
                session=session, settings=runtime.settings, tenant_id=product.tenant_id,
                user_external_id=f"pad{i:06d}", session_external_id=f"pad{i:06d}-s",
                extractor="offline",
                messages=[NewMessage("user" if j % 2 == 0 else "assistant", t,  # type: ignore[arg-type]
                                     created_at=said + dt.timedelta(minutes=j))
                          for j, t in enumerate(texts)],
            )  # fmt: skip
            vectors = rng.standard_normal((PAD_MESSAGES, runtime.embedder.dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            runtime.messages_of(tenant_id=product.tenant_id, user_id=result.user_id).upsert(
                [VectorPoint(m.id, v, {"session_id": result.chat_id, "role": m.role})
                 for m, v in zip(result.messages, vectors, strict=True)]
            )  # fmt: skip
            product.pad_vectors.update(
                (m.id, v) for m, v in zip(result.messages, vectors, strict=True)
            )
            if i % 500 == 499:
                session.commit()
                print(f"  padded {i + 1} users", flush=True)
        session.commit()


def keyword_index_build(product: Product) -> tuple[float, float]:
    """(seconds to rebuild, MB) of the SQL keyword index: FTS5's 'rebuild', or a REINDEX of
    PostgreSQL's GIN index (its tsvector column is computed on insert, inside the ingest)."""
    with Session(product.runtime.engine) as session:
        dialect = session.get_bind().dialect.name
        started = time.perf_counter()
        if dialect == "sqlite":
            rebuild_keyword_index(session)
            seconds = time.perf_counter() - started
            size = session.execute(
                text("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'messages_fts%'")
            ).scalar_one()
        else:
            session.execute(text("REINDEX INDEX ix_messages_content_tsv"))
            session.commit()
            seconds = time.perf_counter() - started
            size = session.execute(
                text(
                    "SELECT pg_relation_size('ix_messages_content_tsv')"
                    " + (SELECT sum(pg_column_size(content_tsv)) FROM messages)"
                )
            ).scalar_one()
    return seconds, int(size) / 1e6


# -- Qdrant Edge shards ---------------------------------------------------------------------


@dataclass(frozen=True)
class EdgeVariant:
    key: str
    title: str
    lexical: str  # "sparse": a Bm25 vector per point; "text": a BM25-scored text index
    dated: bool  # the lexical side reads index_text ("(8 May 2023) Ana: ...") not content


VARIANTS = (
    EdgeVariant("edge", "Edge: dense + BM25 sparse (content), RRF in engine", "sparse", False),
    EdgeVariant("edge-dated", "Edge: dense + BM25 sparse (dated text), RRF", "sparse", True),
    EdgeVariant("edge-text", "Edge: dense + text index BM25 (content), RRF", "text", False),
)


@dataclass
class EdgeIndex:
    variant: EdgeVariant
    shard: qe.EdgeShard
    folder: Path
    build_s: float
    points: int


def user_filter(user_id: str) -> qe.Filter:
    return qe.Filter(must=[qe.FieldCondition(key=USER_FIELD, match=qe.MatchValue(value=user_id))])


def build_edge(folder: Path, variant: EdgeVariant, product: Product, bm25: qe.Bm25) -> EdgeIndex:
    """A shard holding every message of every user, keyed as the product keys them (point id
    = message id, the user in an is_tenant keyword field), with the product's own vectors."""
    columns = (Message.id, Message.user_id, Message.role, Message.speaker, Message.content,
               Message.created_at)  # fmt: skip
    with Session(product.runtime.read_engine) as session:
        # Rows, not ORM objects (padded runs hold 100,000s); index_text reads these columns.
        messages = session.execute(sa_select(*columns).order_by(col(Message.seq))).all()
    vectors: dict[str, Any] = dict(product.pad_vectors)
    for user in product.users.values():  # the LoCoMo users: the vectors the product stored
        store = product.runtime.messages_of(tenant_id=product.tenant_id, user_id=user.id)
        ids = [m.id for m in messages if m.user_id == user.id and is_indexable(m)]  # type: ignore[arg-type]
        vectors.update((h.id, h.vector) for h in store.retrieve(ids, with_vectors=True))
    dim = product.runtime.embedder.dim
    sparse = {SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
    config = qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
        sparse_vectors=sparse if variant.lexical == "sparse" else None,
        # the product's setting for a shared collection (ADR 0012)
        hnsw_config=qe.HnswIndexConfig(
            m=0, ef_construct=100, full_scan_threshold=10_000, payload_m=16
        ),
    )
    started = time.perf_counter()
    shard = qe.EdgeShard.create(str(folder), config)
    indexes: list[tuple[str, Any]] = [(USER_FIELD, qe.KeywordIndexParams(is_tenant=True))]
    if variant.lexical == "text":
        english = qe.SnowballParams(qe.SnowballLanguage.English)
        params = qe.TextIndexParams(
            tokenizer=qe.TokenizerType.Word,
            lowercase=True,
            stopwords=qe.Language.English,
            stemmer=english,
            scoring=True,
        )
        indexes.append((TEXT, params))
    for name, params in indexes:
        shard.update(qe.UpdateOperation.create_field_index(name, params))
    for start in range(0, len(messages), BATCH):
        points = [
            _edge_point(m, vectors.get(m.id), variant, bm25)
            for m in messages[start : start + BATCH]
        ]
        shard.update(qe.UpdateOperation.upsert_points(points))
    shard.flush()
    return EdgeIndex(variant, shard, folder, time.perf_counter() - started, len(messages))


def _edge_point(message: Any, vector: Any, variant: EdgeVariant, bm25: qe.Bm25) -> qe.Point:
    """Dense vector when the product embedded the message (small talk: none), and the text."""
    lexical = index_text(message) if variant.dated else message.content
    named: dict[str, Any] = {} if vector is None else {DENSE: [float(x) for x in vector]}
    payload: dict[str, Any] = {USER_FIELD: message.user_id}
    if variant.lexical == "sparse":
        doc = bm25.embed_document(lexical)
        if doc.indices:  # a message of stopwords only has no terms
            named[SPARSE] = doc
    else:
        payload[TEXT] = lexical
    return qe.Point(str(uuid.UUID(message.id)), named, payload)


def edge_ids(index: EdgeIndex, bm25: qe.Bm25, *, user_id: str, query: str,
             vector: list[float], use: str, idf_of_user: bool = False) -> list[str]:  # fmt: skip
    """Top-K message ids: `use` is "hybrid", "dense" or "lexical"; `idf_of_user`: BM25's
    IDF from the user's own messages rather than the whole shard (Qdrant 1.19's IdfParams)."""
    depth = candidate_depth(K)
    dense = qe.Query.Nearest(vector, using=DENSE)
    lexical: Any
    if index.variant.lexical == "text":
        lexical = qe.TextQuery(TEXT, query)
    else:
        sparse = bm25.embed_query(query)
        lexical = qe.Query.Nearest(sparse, using=SPARSE) if sparse.indices else None
    params = qe.SearchParams(idf=qe.IdfParams(corpus=user_filter(user_id))) if idf_of_user else None
    if use == "hybrid":
        prefetches = [qe.Prefetch(limit=depth, query=dense)]
        if lexical is not None:
            prefetches.append(qe.Prefetch(limit=depth, query=lexical, params=params))
        request = qe.QueryRequest(
            limit=K, prefetches=prefetches, query=qe.Fusion.Rrf(k=RRF_K),
            filter=user_filter(user_id), with_payload=False,
        )  # fmt: skip
    else:
        single = dense if use == "dense" else lexical
        if single is None:
            return []
        request = qe.QueryRequest(
            limit=K, query=single, filter=user_filter(user_id), with_payload=False,
            params=params if use == "lexical" else None,
        )  # fmt: skip
    return [str(h.id) for h in index.shard.query(request)]


# -- running and scoring ---------------------------------------------------------------------


def hit_rows(session: Session, user: User, ids: Sequence[str]) -> list[str | None]:
    """The hits' rows from SQL, as an answer needs them; returns their external ids in order.
    A hit that is not the user's message would come back short: checked by the caller."""
    if not ids:
        return []
    rows = {r.id: r for r in session.execute(_HIT_ROWS, {"ids": list(ids), "user_id": user.id})}
    assert len(rows) == len(set(ids)), "a hit outside the user's messages"
    return [rows[i].external_id for i in ids]


def vector_search(
    *,
    messages: UserVectors | None,
    embedder: Embedder,
    user: User,
    query: str,
    limit: int,
    query_vector: Vector | None = None,
) -> list[str]:
    """Message ids nearest in meaning, best first: the dense half of the product's search, on
    its own; [] when the vector store cannot be reached from this process (embedded Qdrant
    owned by a separate worker)."""
    if messages is None:
        return []
    try:
        vector = query_vector if query_vector is not None else embedder.embed([query])[0]
        hits = messages.search(vector, limit=limit)
    except Unavailable as exc:
        log.warning("history search without vectors: %s", exc.message, extra={"user_id": user.id})
        return []
    return [h.id for h in hits]


Method = Callable[[Session, User, Question, list[float]], list[str | None]]


def methods(product: Product, edges: Sequence[EdgeIndex], bm25: qe.Bm25) -> dict[str, Method]:
    runtime = product.runtime

    def messages_of(u: User) -> UserVectors | None:
        return runtime.messages_if_reachable(tenant_id=u.tenant_id, user_id=u.id)

    def hybrid(s: Session, u: User, q: Question, v: list[float]) -> list[str | None]:
        hits = search_history(messages=messages_of(u), embedder=runtime.embedder,
                              context=runtime.settings.context, session=s, user=u,
                              query=q.text, k=K, query_vector=v)  # fmt: skip
        return [h.external_id for h in hits]

    def in_sql(s: Session, u: User, q: Question, v: list[float]) -> list[str | None]:
        depth = candidate_depth(K)
        ids = vector_search(messages=messages_of(u), embedder=runtime.embedder, user=u,
                            query=q.text, limit=depth, query_vector=v)  # fmt: skip
        hits = search_history_in_sql(rrf_k=runtime.settings.context.rrf_k, session=s, user=u,
                                     query=q.text, k=K, by_meaning=ids)  # fmt: skip
        return [h.external_id for h in hits]

    def keyword(s: Session, u: User, q: Question, v: list[float]) -> list[str | None]:
        return hit_rows(s, u, keyword_search(session=s, user_id=u.id, query=q.text, limit=K))

    def dense(s: Session, u: User, q: Question, v: list[float]) -> list[str | None]:
        ids = vector_search(messages=messages_of(u), embedder=runtime.embedder, user=u,
                            query=q.text, limit=K, query_vector=v)  # fmt: skip
        return hit_rows(s, u, ids)

    def edge(index: EdgeIndex, use: str, idf_of_user: bool = False) -> Method:
        def run(s: Session, u: User, q: Question, v: list[float]) -> list[str | None]:
            ids = edge_ids(index, bm25, user_id=u.id, query=q.text, vector=v, use=use,
                           idf_of_user=idf_of_user)  # fmt: skip
            return hit_rows(s, u, ids)

        return run

    found: dict[str, Method] = {
        "product: engine's dense + BM25 sparse lists, RRF in Python (search_history)": hybrid,
        "product's SQL path: SQL full-text + dense, RRF in Python (search_history_in_sql)": (
            in_sql
        ),
        "product: SQL full-text only (keyword_search)": keyword,
        "product: dense only (vector_search)": dense,
    }
    for index in edges:
        found[index.variant.title] = edge(index, "hybrid")
    first = edges[0]
    found["Edge: dense + BM25 sparse (content), IDF of the user's messages"] = edge(
        first, "hybrid", idf_of_user=True
    )
    found["Edge: BM25 sparse only (content)"] = edge(first, "lexical")
    found["Edge: dense only"] = edge(first, "dense")
    text_index = next(i for i in edges if i.variant.lexical == "text")
    found["Edge: text index BM25 only (content)"] = edge(text_index, "lexical")
    return found


@dataclass
class Score:
    found: dict[str, list[tuple[bool, bool, bool]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # category (and "all") → (any@10, all@10, any@5) per question
    ms: list[float] = field(default_factory=list)
    hits: list[list[str | None]] = field(default_factory=list)

    def add(self, question: Question, hits: Sequence[str | None]) -> None:
        self.hits.append(list(hits))
        mark = (found_any(question, hits, K), found_all(question, hits, K),
                found_any(question, hits, 5))  # fmt: skip
        self.found["all"].append(mark)
        self.found[CATEGORIES[question.category]].append(mark)

    def rates(self, category: str = "all") -> tuple[float, float, float]:
        marks = self.found[category]
        return tuple(sum(m[i] for m in marks) / len(marks) for i in range(3))  # type: ignore[return-value]


def measure(product: Product, data: Dataset, found: dict[str, Method], rounds: int,
            vectors: list[list[float]]) -> dict[str, Score]:  # fmt: skip
    """One scored pass (also the warm-up), then `rounds` timed passes; per question the
    methods take turns in a rotating order."""
    scores = {name: Score() for name in found}
    names = list(found)
    with Session(product.runtime.read_engine) as session:
        for q, v in zip(data.questions, vectors, strict=True):
            user = product.users[q.user]
            for name in names:
                scores[name].add(q, found[name](session, user, q, v))
        for r in range(rounds):
            for i, (q, v) in enumerate(zip(data.questions, vectors, strict=True)):
                user = product.users[q.user]
                shift = (i + r) % len(names)
                for name in names[shift:] + names[:shift]:
                    started = time.perf_counter()
                    found[name](session, user, q, v)
                    scores[name].ms.append((time.perf_counter() - started) * 1000)
    return scores


def embed_questions(
    runtime: Runtime, questions: Sequence[Question]
) -> tuple[list[list[float]], float]:
    """Each question embedded alone, as a search does; (vectors, p50 ms)."""
    vectors, ms = [], []
    for q in questions:
        started = time.perf_counter()
        vectors.append([float(x) for x in runtime.embedder.embed([q.text])[0]])
        ms.append((time.perf_counter() - started) * 1000)
    return vectors, percentile(ms, 50)


def disk_mb(folders: Sequence[Path]) -> float:
    """Real blocks (Edge's WAL files are sparse)."""
    return sum(disk_bytes(str(folder)) or 0 for folder in folders) / 1e6


# -- report ------------------------------------------------------------------------------------


def run_backend(backend: str, args: argparse.Namespace, data: Dataset, root: Path) -> str:
    folder = root / backend
    folder.mkdir()
    database = postgres_database("tiermem_bench_hybrid") if backend == "postgres" else None
    with database or nullcontext(None) as url:
        print(f"{backend}: loading {sum(map(len, data.sessions.values()))} messages", flush=True)
        product = load_product(folder, url, data, args.pad_users)
        kw_s, kw_mb = keyword_index_build(product)
        bm25 = qe.Bm25(qe.Bm25Config(avg_len=args.bm25_avg_len))
        edges = [build_edge(root / f"{backend}-{v.key}", v, product, bm25) for v in VARIANTS]
        vectors, embed_ms = embed_questions(product.runtime, data.questions)
        print(f"{backend}: measuring {len(data.questions)} questions × {args.rounds} rounds",
              flush=True)  # fmt: skip
        found = methods(product, edges, bm25)
        scores = measure(product, data, found, args.rounds, vectors)
        for index in edges:
            index.shard.close()
        product.runtime.close()  # flushes the product's shards before they are measured
        product_vectors_mb = disk_mb(list((folder / "vectors").glob("*_m")))
        edge_mb = {i.variant.key: disk_mb([i.folder]) for i in edges}
    base = scores[next(iter(scores))]
    # The same vectors in the same engine: the product's dense search and the shard's agree.
    same = sum(a == b for a, b in zip(scores["product: dense only (vector_search)"].hits,
                                      scores["Edge: dense only"].hits, strict=True))  # fmt: skip
    base_p50, base_p95 = percentile(base.ms, 50), percentile(base.ms, 95)
    lines = [
        f"### {backend}", "",
        "| method | any@10 | all@10 | any@5 | any@10 questions won / lost vs product "
        "| p50 ms | p95 ms | p50 / p95 vs product |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, score in scores.items():
        a10, l10, a5 = score.rates()
        p50, p95 = percentile(score.ms, 50), percentile(score.ms, 95)
        pairs = list(zip(score.found["all"], base.found["all"], strict=True))
        won = sum(m[0] and not b[0] for m, b in pairs)
        lost = sum(b[0] and not m[0] for m, b in pairs)
        lines.append(
            f"| {name} | {a10:.3f} | {l10:.3f} | {a5:.3f} | +{won} / −{lost} "
            f"| {p50:.2f} | {p95:.2f} "
            f"| {p50 / base_p50:.2f}× / {p95 / base_p95:.2f}× |"
        )
    lines += [
        "", f"Per category ({backend}), any@10 / all@10 / any@5 "
        f"(questions: {', '.join(f'{c} {len(base.found[c])}' for c in CATEGORIES.values())}):",
        "", "| method | " + " | ".join(CATEGORIES.values()) + " |",
        "|---|" + "---|" * len(CATEGORIES),
    ]  # fmt: skip
    for name, score in scores.items():
        cells = [" / ".join(f"{x:.2f}" for x in score.rates(c)) for c in CATEGORIES.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "", f"Dense top-{K} lists identical, product against Edge shard: {same} of "
        f"{len(data.questions)} questions.",
        "", f"Build and disk ({backend}; query "
        f"embedding p50 {embed_ms:.1f} ms a question, excluded above):", "",
        "| index | build | disk |", "|---|---|---|",
        f"| messages stored by ingest (keyword index kept by SQL on insert) "
        f"| {product.ingest_s:.2f} s | |",
        *([f"| padding: {args.pad_users:,} users × {PAD_MESSAGES} messages (ingest + "
           f"random vectors) | {product.pad_s:.0f} s | |"] if args.pad_users else []),
        f"| SQL keyword index ({'FTS5 rebuild' if backend == 'sqlite' else 'GIN reindex'}) "
        f"| {kw_s:.3f} s | {kw_mb:.2f} MB |",
        f"| product message points (index_messages: dense + sparse, indexed_at set; "
        f"embedding {product.embed_s:.1f} s "
        f"not counted) | {product.vector_index_s:.2f} s | {product_vectors_mb:.2f} MB |",
        *(f"| {i.variant.title}: {i.points} points (vectors precomputed) | {i.build_s:.2f} s "
          f"| {edge_mb[i.variant.key]:.2f} MB |" for i in edges),
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="locomo-dev.json")
    parser.add_argument("--sql", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over the questions")
    parser.add_argument("--bm25-avg-len", type=float, default=256.0,
                        help="Edge Bm25's expected document length in tokens")  # fmt: skip
    parser.add_argument(
        "--pad-users",
        type=int,
        default=0,
        help=f"other users in the tenant, {PAD_MESSAGES} messages each",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data folders")
    args = parser.parse_args(argv)
    data = load_dataset(args.data)
    load = load_average()
    root = Path(tempfile.mkdtemp(prefix="tiermem-bench-hybrid-"))
    try:
        sections = [run_backend(b, args, data, root) for b in args.sql.split(",")]
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    messages = sum(map(len, data.sessions.values()))
    report = "\n".join([
        "# Message search: the product's history search, and Qdrant Edge queried directly "
        "(bench/bench_hybrid.py)", "",
        f"{machine_line()}; load {load}",
        f"`{command_line('bench.bench_hybrid', argv)}`", "",
        f"LoCoMo dev split: {len({u for u, _ in data.sessions})} users, {len(data.sessions)} "
        f"sessions, {messages} messages, {len(data.questions)} questions (categories 1-4 with "
        f"evidence). k = {K}, {candidate_depth(K)} candidates a side, RRF k = {RRF_K}; "
        f"Edge Bm25 avg_len {args.bm25_avg_len:g}; latency over {args.rounds} passes, "
        "hits' rows read from SQL included."
        + (f" The tenant also holds {args.pad_users:,} other users × {PAD_MESSAGES} generated "
           "messages (random vectors): in SQL, in the product's shard and in every Edge shard."
           if args.pad_users else ""), "",
        *("\n\n".join(sections).splitlines()),
    ])  # fmt: skip
    write_results(RESULTS_DIR / "hybrid.md", report + "\n")
    print(report)


if __name__ == "__main__":
    main()
