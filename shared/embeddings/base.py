"""The Embedder protocol every provider implements, and the LRU cache that wraps any of them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Texts in, one L2-normalized float32 row per text out; `embed([])` gives shape (0, dim)."""

    name: str  # provider and model, e.g. "local:all-MiniLM-L6-v2-int8"; stored with vectors
    dim: int

    def embed(self, texts: Sequence[str]) -> Vectors: ...


def empty(dim: int) -> Vectors:
    return np.zeros((0, dim), dtype=np.float32)


def l2_normalize(rows: npt.NDArray[np.floating]) -> Vectors:
    """Rows scaled to unit length; an all-zero row stays zero instead of becoming NaN."""
    out = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    unit: Vectors = out / np.maximum(norms, np.float32(1e-12))
    return unit


class CachedEmbedder:
    """An Embedder that answers repeated texts from a thread-safe LRU and batches the rest.

    `hits` counts texts answered without the inner embedder (a text repeated inside one
    call is computed once and counted as a hit after its first occurrence); `misses`
    counts texts sent to it, so hits + misses is the number of texts asked for.
    """

    def __init__(self, inner: Embedder, *, cache_size: int = 10_000, batch_size: int = 32) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.inner = inner
        self.name = inner.name  # the cache never changes a vector, so it keeps the inner name
        self.dim = inner.dim
        self.cache_size = max(cache_size, 0)
        self.batch_size = batch_size
        self.hits = 0
        self.misses = 0
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return empty(self.dim)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}  # text → positions; dict keeps first-seen order
        with self._lock:
            for i, text in enumerate(texts):
                row = self._cache.get(text)
                if row is not None:
                    self._cache.move_to_end(text)
                    out[i] = row
                else:
                    missing.setdefault(text, []).append(i)
            self.misses += len(missing)
            self.hits += len(texts) - len(missing)

        if missing:
            # The inner call runs outside the lock so concurrent callers with warm texts are
            # not held up by a slow model or network call; two threads missing the same text
            # at once both compute it, which is cheaper than coordinating them.
            computed = self._compute(list(missing))
            with self._lock:
                for text, row in computed.items():
                    out[missing[text]] = row
                    if self.cache_size:
                        self._cache[text] = row
                        self._cache.move_to_end(text)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return out

    def _compute(self, texts: list[str]) -> dict[str, Vectors]:
        # Similar lengths side by side mean less padding in each batch the local model runs.
        ordered = sorted(texts, key=len)
        out: dict[str, Vectors] = {}
        for start in range(0, len(ordered), self.batch_size):
            chunk = ordered[start : start + self.batch_size]
            vectors = self.inner.embed(chunk)
            if vectors.shape != (len(chunk), self.dim):
                raise ValueError(
                    f"{self.inner.name} returned shape {vectors.shape} for {len(chunk)} texts"
                )
            for text, row in zip(chunk, vectors, strict=True):
                # A read-only copy: a cached row must not keep the whole batch array alive.
                kept = np.array(row, dtype=np.float32)
                kept.flags.writeable = False
                out[text] = kept
        return out
