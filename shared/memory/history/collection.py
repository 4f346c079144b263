"""One user's message collection as history search and indexing open it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from shared.embeddings import Embedder
from shared.vectors.scope import UserVectors

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UserHistory:
    """One user's message collection and the embedder that fills and searches it, each
    opened on first use (the caller builds it: `Runtime.history_of`). The vector store may
    be another process's (embedded Qdrant held by the worker): opening it raises
    Unavailable, and history search then answers from SQL without loading the model."""

    messages: Callable[[], UserVectors]
    embedder: Callable[[], Embedder]


_REINDEX_TOLD = threading.Event()


def holds_words(messages: UserVectors) -> bool:
    """Whether the user's message collection holds sparse vectors; when it was made before
    them, says once per process what remakes it."""
    held = messages.has_sparse()
    if held is False and not _REINDEX_TOLD.is_set():
        _REINDEX_TOLD.set()
        log.warning(
            "message collections made by an earlier tiermem hold no sparse vectors: history "
            "search answers their users from SQL full-text and dense vectors, as before. Run "
            "`tiermem reindex` once to remake them (ADR 0013)"
        )
    return bool(held)
