"""The process's shared resources (engine, embedder, vector store, extractor, locks), opened lazily.

The API opens the vector store only for routes that need it: with embedded Qdrant one
process owns the folder, and in the split api/worker setup that process is the worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Engine

from shared.chat.client import ChatModel
from shared.compression.locks import SessionLocks, make_session_locks
from shared.compression.summary import Summarizer
from shared.config import Settings
from shared.db.engine import make_engine, read_only
from shared.embeddings import Embedder, make_embedder
from shared.errors import Unavailable
from shared.extraction.base import Extractor
from shared.memory.locks import UserLocks, make_user_locks
from shared.records.tenancy import KeyCache
from shared.vectors import VectorStore, local_mode_leftovers, open_vector_store
from shared.vectors.scope import (
    Kind,
    UserVectors,
    message_collections_without_sparse,
    other_layout_collections,
    user_vectors,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# At startup, how many message collections are checked for sparse vectors (on a server,
# a request each); history search says the same of any other one when it meets it.
OUTDATED_CHECKED = 20


class Runtime:
    def __init__(self, settings: Settings, *, engine: Engine | None = None) -> None:
        self.settings = settings
        self.engine = engine or make_engine(settings)
        # For sessions that only read: under SQLite they never wait for a writer.
        self.read_engine = read_only(self.engine)
        self._lock = threading.Lock()
        self._vectors: VectorStore | None = None
        self._embedder: Embedder | None = None
        self._extractor: Extractor | None = None
        self._chat_model: ChatModel | None = None
        self._summarizer: Summarizer | None = None
        self.key_cache = KeyCache(settings.auth.key_cache_s)
        # Built now (a Redis client connects on first use): one lock table per process.
        self.user_locks: UserLocks = make_user_locks(settings)
        self.session_locks: SessionLocks = make_session_locks(settings)

    def _open_once(self, attribute: str, open_: Callable[[], T]) -> T:
        """The resource kept in `attribute`, opened by `open_` on first use: once, however
        many threads ask at the same time."""
        value: T | None = getattr(self, attribute)
        if value is None:
            with self._lock:
                value = getattr(self, attribute)
                if value is None:
                    value = open_()
                    setattr(self, attribute, value)
        return value

    @property
    def vectors(self) -> VectorStore:
        return self._open_once("_vectors", lambda: _open_vectors(self.settings))

    @property
    def vectors_open(self) -> bool:
        return self._vectors is not None

    @property
    def embedder(self) -> Embedder:
        return self._open_once("_embedder", lambda: make_embedder(self.settings.embeddings))

    @property
    def extractor(self) -> Extractor:
        return self._open_once("_extractor", lambda: _make_extractor(self.settings))

    @property
    def chat_model(self) -> ChatModel:
        """Raises ChatNotConfigured (503) when neither a chat nor an LLM endpoint is set."""
        return self._open_once("_chat_model", lambda: ChatModel(self.settings))

    @property
    def summarizer(self) -> Summarizer:
        """The compression summarizer: the LLM's when one is configured, else offline."""
        return self._open_once("_summarizer", lambda: _make_summarizer(self.settings))

    @summarizer.setter
    def summarizer(self, summarizer: Summarizer) -> None:
        """Tests and benchmarks script one."""
        self._summarizer = summarizer

    def facts_of(self, *, tenant_id: str, user_id: str) -> UserVectors:
        """The user's facts in the vector store: every read and write of them goes here."""
        return self._user_vectors(tenant_id, user_id, "facts")

    def messages_of(self, *, tenant_id: str, user_id: str) -> UserVectors:
        """The user's messages, for history search (point id = message id). Apart from the
        facts, so fact search and dedup never meet a message."""
        return self._user_vectors(tenant_id, user_id, "messages")

    def messages_if_reachable(self, *, tenant_id: str, user_id: str) -> UserVectors | None:
        """The user's messages, or None when this process cannot open the vector store (the
        embedded folder is another process's): history search then answers from SQL alone."""
        try:
            return self.messages_of(tenant_id=tenant_id, user_id=user_id)
        except Unavailable as exc:
            log.warning(
                "history search without vectors: %s", exc.message, extra={"user_id": user_id}
            )
            return None

    def _user_vectors(self, tenant_id: str, user_id: str, kind: Kind) -> UserVectors:
        q = self.settings.qdrant
        return user_vectors(
            self.vectors,
            layout=q.layout,
            secret_key=self.settings.secret_key,
            prefix=q.collection_prefix,
            tenant_id=tenant_id,
            user_id=user_id,
            kind=kind,
        )

    def close(self) -> None:
        if self._vectors is not None:
            self._vectors.close()
            self._vectors = None
        if self._chat_model is not None:
            self._chat_model.close()
            self._chat_model = None
        self.engine.dispose()


def _open_vectors(settings: Settings) -> VectorStore:
    store = open_vector_store(settings)
    try:
        _warn_of_vectors_to_move(store, settings)
    except Exception:  # a hint only: it must never fail the caller
        log.warning("could not check the vector store's layout", exc_info=True)
    return store


def _warn_of_vectors_to_move(store: VectorStore, settings: Settings) -> None:
    """Vectors an earlier setting or version left where this one does not look: searches
    miss them until `tiermem reindex` rebuilds them from SQL."""
    q = settings.qdrant
    earlier = local_mode_leftovers(settings)
    if earlier is not None:
        log.warning(
            "vectors of an earlier tiermem (qdrant-client's local mode, removed) are in %s "
            "and nothing reads them: the embedded engine is Qdrant Edge in %s. Run `tiermem "
            "reindex` once to rebuild every user's vectors there from SQL, then delete %s",
            earlier,
            settings.qdrant_path,
            earlier,
        )
    left = other_layout_collections(store, prefix=q.collection_prefix, layout=q.layout)
    if left:
        log.warning(
            "the vector store holds %d collections of the other layout than "
            "TIERMEM_QDRANT__LAYOUT=%s: searches do not see them until `tiermem reindex` "
            "rebuilds every user in this layout from SQL (and drops them)",
            len(left),
            q.layout,
        )
    outdated = message_collections_without_sparse(
        store, prefix=q.collection_prefix, layout=q.layout, limit=OUTDATED_CHECKED
    )
    if outdated:
        log.warning(
            "%d message collections (of the first %d looked at) were made by a tiermem before "
            "sparse vectors: history search answers their users from SQL full-text and dense "
            "vectors, without the engine's hybrid search, until `tiermem reindex` remakes them",
            len(outdated),
            OUTDATED_CHECKED,
        )


def _make_extractor(settings: Settings) -> Extractor:
    if settings.extractor_kind == "llm":
        from shared.extraction.llm_extractor import LLMExtractor

        return LLMExtractor(settings.llm, settings.extraction)
    from shared.extraction.offline import OfflineExtractor

    return OfflineExtractor(settings.extraction)


def _make_summarizer(settings: Settings) -> Summarizer:
    """The LLM summarizer when an LLM is configured (one client per process), else offline."""
    if settings.llm.base_url:
        from shared.compression.llm import LLMSummarizer

        return LLMSummarizer(settings.llm)
    from shared.compression.offline import OfflineSummarizer

    return OfflineSummarizer()
