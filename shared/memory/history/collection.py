"""One user's message collection: whether it holds the words (sparse vectors) search asks for."""

from __future__ import annotations

import logging
import threading

from shared.vectors.scope import UserVectors

log = logging.getLogger(__name__)

_REINDEX_TOLD = threading.Event()


def holds_words(messages: UserVectors) -> bool:
    """Whether the user's message collection holds sparse vectors; when it was made before
    them, says once per process what remakes it."""
    has_sparse = messages.has_sparse()
    if has_sparse is False and not _REINDEX_TOLD.is_set():
        _REINDEX_TOLD.set()
        log.warning(
            "message collections made by an earlier tiermem hold no sparse vectors: history "
            "search answers their users from SQL full-text and dense vectors, as before. Run "
            "`tiermem reindex` once to remake them (ADR 0013)"
        )
    return bool(has_sparse)
