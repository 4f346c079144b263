"""Loading the context benchmark's users into an embedded world (SQLite file, Qdrant folder).

Everything goes through the product's own code: messages through `shared.records.ingest` (which
fills the FTS5 index by trigger) and `shared.memory.history.indexing.index_messages` (the message
collection); facts either through `shared.memory.writer.write_facts` ("writer") or as the
very rows and points it would produce, written in bulk ("bulk"), with its merge decisions
replayed (see `bulk_facts`). Embeddings are computed once per distinct text and may be
kept on disk between runs; they are exactly what the product's embedder returns.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import random
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sqlalchemy import update
from sqlmodel import Session, col, select

from bench.context_data import GenFact, GenSession, GenUser
from shared.config import EmbeddingSettings, QdrantSettings, Settings
from shared.db.migrate import upgrade_to_head
from shared.db.models import ExtractionRun, Fact, Message, User
from shared.embeddings.base import Vectors
from shared.embeddings.local_onnx import OnnxMiniLMEmbedder
from shared.flows.extract_turn import index_user_messages
from shared.memory import writer
from shared.memory.guard import scan
from shared.memory.normalize import may_be_paraphrases
from shared.records.ingest import NewMessage, ingest_messages
from shared.records.tenancy import ensure_dev_tenant, get_tenant_by_name
from shared.runtime import Runtime
from shared.vectors import VectorPoint


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- embeddings ------------------------------------------------------------------------------


class VectorCache:
    """text → the local model's vector, computed once (on `threads` threads) and optionally
    kept in an .npz between runs, keyed by the SHA-1 of the text."""

    def __init__(self, path: Path | None, *, threads: int) -> None:
        self.path = path
        self.threads = max(1, threads)
        self.model = OnnxMiniLMEmbedder(EmbeddingSettings())
        self.name, self.dim = self.model.name, self.model.dim
        self._rows: dict[bytes, np.ndarray] = {}
        self.computed = 0
        if path is not None and path.exists():
            data = np.load(path)
            self._rows = dict(zip((bytes(k) for k in data["keys"]), data["vectors"], strict=True))
            log(f"embedding cache: {len(self._rows)} vectors from {path}")

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.sha1(text.encode()).digest()

    def ensure(self, texts: Iterable[str]) -> None:
        missing = sorted({t for t in texts if self._key(t) not in self._rows}, key=len)
        if not missing:
            return
        started = time.perf_counter()
        chunks = [missing[i : i + 256] for i in range(0, len(missing), 256)]
        with ThreadPoolExecutor(self.threads) as pool:
            for chunk, vectors in zip(chunks, pool.map(self.model.embed, chunks), strict=True):
                for text, row in zip(chunk, vectors, strict=True):
                    self._rows[self._key(text)] = row
        self.computed += len(missing)
        seconds = time.perf_counter() - started
        log(f"embedded {len(missing)} texts in {seconds:.1f}s ({len(missing) / seconds:.0f}/s)")

    def get(self, texts: Sequence[str]) -> Vectors:
        self.ensure(texts)
        return np.stack([self._rows[self._key(t)] for t in texts]).astype(np.float32)

    def save(self) -> None:
        if self.path is None or not self.computed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._rows), dtype="S20")
        np.savez(self.path, keys=keys, vectors=np.stack(list(self._rows.values())))
        log(f"embedding cache: {len(self._rows)} vectors saved to {self.path}")


class PrecomputedEmbedder:
    """The Embedder protocol over a VectorCache: used only while loading a world."""

    def __init__(self, cache: VectorCache) -> None:
        self.cache, self.name, self.dim = cache, cache.name, cache.dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.cache.get(list(texts))


# -- a world ---------------------------------------------------------------------------------


def world_settings(folder: Path) -> Settings:
    """The embedded default: SQLite file and a Qdrant Edge folder under `folder`, local ONNX
    embeddings; no .env file and nothing from the environment that the args do not set."""
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=folder,
        qdrant=QdrantSettings(),
        embeddings=EmbeddingSettings(),
        log_level="WARNING",
    )


def open_world(folder: Path) -> tuple[Settings, Runtime, str]:
    settings = world_settings(folder)
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    with Session(runtime.engine) as session:
        ensure_dev_tenant(session=session, settings=settings)
        tenant = get_tenant_by_name(session=session, name=settings.auth.dev_tenant)
        assert tenant is not None
        tenant_id = tenant.id
    return settings, runtime, tenant_id


@dataclass
class LoadedUser:
    external_id: str
    user_id: str
    session_external_id: str  # the current session
    user_message_ids: list[tuple[str, str, dt.datetime]] = field(default_factory=list)
    active_facts: int = 0
    merged: int = 0
    messages: int = 0


def load_sessions(
    *,
    runtime: Runtime,
    tenant_id: str,
    external_id: str,
    sessions: Sequence[GenSession],
    cache: VectorCache,
    session_ids: Sequence[str] | None = None,
) -> LoadedUser:
    """Store the sessions through ingest (messages + FTS5 by trigger), mark their runs done
    (as after extraction), and index the messages into the user's message collection."""
    from shared.memory.history.indexing import index_text

    settings = runtime.settings
    loaded: LoadedUser | None = None
    all_ids: list[str] = []
    with Session(runtime.engine) as session:
        for i, gen in enumerate(sessions):
            sid = session_ids[i] if session_ids else gen.external_id
            result = ingest_messages(
                session=session,
                settings=settings,
                tenant_id=tenant_id,
                user_external_id=external_id,
                session_external_id=sid,
                extractor="offline",
                messages=[
                    NewMessage(
                        m.role,
                        m.content,
                        m.speaker,  # type: ignore[arg-type]
                        created_at=m.created_at,
                    )
                    for m in gen.messages
                ],
            )
            if loaded is None:
                loaded = LoadedUser(external_id, result.user_id, sid)
            loaded.session_external_id = sid  # the last one is the current session
            for m, said in zip(result.messages, gen.messages, strict=True):
                all_ids.append(m.id)
                if m.role == "user":
                    loaded.user_message_ids.append((m.id, result.chat_id, said.created_at))
        session.commit()
        assert loaded is not None
        # The steady state after the worker ran: every run done, every message extracted.
        session.execute(
            update(ExtractionRun)
            .where(col(ExtractionRun.user_id) == loaded.user_id)
            .values(status="done")
        )
        session.execute(
            update(Message)
            .where(
                col(Message.user_id) == loaded.user_id, col(Message.extraction_status) == "pending"
            )
            .values(extraction_status="done")
        )
        session.commit()
        rows = session.exec(select(Message).where(col(Message.id).in_(all_ids))).all()
        cache.ensure(index_text(r) for r in rows)
    for start in range(0, len(all_ids), 512):
        index_user_messages(
            runtime=runtime,
            tenant_id=tenant_id,
            user_id=loaded.user_id,
            message_ids=all_ids[start : start + 512],
        )
    loaded.messages = len(all_ids)
    return loaded


def _provenance(tenant_id: str, loaded: LoadedUser, rng: random.Random) -> writer.Provenance:
    message_id, session_id, said_at = rng.choice(loaded.user_message_ids)
    return writer.Provenance(
        tenant_id=tenant_id,
        user_id=loaded.user_id,
        chat_id=session_id,
        message_ids=(message_id,),
        seen_at=said_at,
        extractor="offline",
        extractor_version="bench",
        model=None,
    )


def writer_facts(
    *,
    runtime: Runtime,
    tenant_id: str,
    loaded: LoadedUser,
    facts: Sequence[GenFact],
    more: Iterable[GenFact],
    target: int,
    cache: VectorCache,
    seed: int,
) -> None:
    """Through write_facts, in turns of up to 10 facts said in one message, until the user
    has `target` active facts (merges are topped up from `more`)."""
    rng = random.Random(seed)
    facts_vectors = runtime.facts_of(tenant_id=tenant_id, user_id=loaded.user_id)
    pending = list(facts)
    extra = iter(more)
    cache.ensure(f.fact.content for f in pending)
    while True:
        with Session(runtime.engine) as session:
            active = _count_active(session, loaded.user_id)
        if active >= target:
            break
        if not pending:
            pending = [next(extra) for _ in range(target - active)]
            cache.ensure(f.fact.content for f in pending)
        size = min(rng.randint(1, 10), target - active)
        batch, pending = pending[:size], pending[size:]
        vectors = cache.get([f.fact.content for f in batch])
        with runtime.user_locks.hold(loaded.user_id), Session(runtime.engine) as session:
            out = writer.write_facts(
                session=session,
                facts_vectors=facts_vectors,
                facts=[f.fact for f in batch],
                embeddings=vectors,
                provenance=_provenance(tenant_id, loaded, rng),
                dedup_threshold=runtime.settings.extraction.dedup_threshold,
            )
        loaded.merged += len(out.merged)
    loaded.active_facts = target


def _count_active(session: Session, user_id: str) -> int:
    from sqlmodel import func

    return int(
        session.exec(
            select(func.count())
            .select_from(Fact)
            .where(Fact.user_id == user_id, col(Fact.valid_to).is_(None))
        ).one()
    )


def bulk_facts(
    *,
    runtime: Runtime,
    tenant_id: str,
    loaded: LoadedUser,
    facts: Iterable[GenFact],
    target: int,
    cache: VectorCache,
    seed: int,
    threshold: float,
) -> None:
    """The rows and points write_facts would leave, written in bulk.

    The generator already gives every fact its own normalized content and its own slot, so
    of write_facts' decisions only the cosine merge can happen: an unslotted fact with
    cosine ≥ `threshold` to a stored fact of its type that passes `may_be_paraphrases`
    (a slotted fact only merges within its own slot). That decision is replayed here in
    order, exactly, against every fact kept so far (write_facts asks the store for the top
    5; the best match is the one it would find); a merge bumps the kept row's mention count,
    last-seen time and sources as `_merge` does, and one more fact is drawn.
    """
    rng = random.Random(seed)
    kept: list[Fact] = []
    kept_vectors: list[np.ndarray] = []
    # per type: the kept rows' positions and their vectors, stacked in a growing matrix
    by_type: dict[str, tuple[list[int], np.ndarray]] = {}
    source = iter(facts)
    pending: list[GenFact] = []
    while len(kept) < target:
        if not pending:
            pending = list(itertools.islice(source, min(512, 2 * (target - len(kept)) + 8)))
            if not pending:
                raise SystemExit(
                    f"{loaded.external_id}: ran out of distinct facts after "
                    f"{len(kept)} (raise the pool)"
                )
            cache.ensure(f.fact.content for f in pending)
        item = pending.pop(0)
        fact = item.fact
        vector = cache.get([fact.content])[0]
        provenance = _provenance(tenant_id, loaded, rng)
        target_row: Fact | None = None
        positions, matrix = by_type.get(fact.type, ([], np.zeros((0, cache.dim), np.float32)))
        if not fact.slot and positions:
            scores = matrix[: len(positions)] @ vector
            for j in np.argsort(-scores):
                if scores[j] < threshold:
                    break
                candidate = kept[positions[j]]
                if not candidate.slot and may_be_paraphrases(candidate.content, fact.content):
                    target_row = candidate
                    break
        if target_row is not None:
            writer._merge(target_row, fact, provenance)  # the writer's own merge
            loaded.merged += 1
            continue
        row = writer._new_row(fact, provenance)  # the writer's own row
        row.quarantine_reason = scan(row.content)  # None for this data; kept for fidelity
        if len(positions) == len(matrix):  # grow by doubling
            matrix = np.concatenate(
                [matrix, np.zeros((max(64, len(matrix)), cache.dim), np.float32)]
            )
        matrix[len(positions)] = vector
        positions.append(len(kept))
        by_type[fact.type] = (positions, matrix)
        kept.append(row)
        kept_vectors.append(vector)
    with Session(runtime.engine, expire_on_commit=False) as session:
        session.add_all(kept)
        session.commit()
        points = [
            VectorPoint(id=r.id, vector=v, payload=writer.point_payload(r))
            for r, v in zip(kept, kept_vectors, strict=True)
        ]
    facts_vectors = runtime.facts_of(tenant_id=tenant_id, user_id=loaded.user_id)
    for start in range(0, len(points), 1024):
        facts_vectors.upsert(points[start : start + 1024])
    loaded.active_facts = len(kept)


def check_world(runtime: Runtime, tenant_id: str, users: Sequence[LoadedUser]) -> list[str]:
    """Problems, if any: active facts in SQL and points in each user's collection agree."""
    problems = []
    with Session(runtime.engine) as session:
        for u in users:
            active = _count_active(session, u.user_id)
            points = runtime.facts_of(tenant_id=tenant_id, user_id=u.user_id).count()
            if active != points or active != u.active_facts:
                problems.append(
                    f"{u.external_id}: {active} active facts, {points} points, "
                    f"expected {u.active_facts}"
                )
            if session.get(User, u.user_id) is None:
                problems.append(f"{u.external_id}: no user row")
    return problems


def user_sessions(user: GenUser) -> list[GenSession]:
    return [*user.earlier, user.current]
