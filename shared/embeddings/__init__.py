"""Text embeddings: the Embedder protocol, its providers, and the factory that picks one."""

from __future__ import annotations

import threading

from shared.config import EmbeddingSettings
from shared.embeddings.base import CachedEmbedder, Embedder, Vectors, l2_normalize

__all__ = ["CachedEmbedder", "Embedder", "Vectors", "l2_normalize", "make_embedder"]

# An onnxruntime session of the local model holds ~150 MB (its weights unpacked for the
# CPU), and it never changes once loaded: every Runtime of a process (a CLI command's, the
# test suite's one per test) shares one per configuration instead of loading its own.
_LOCAL_MODELS: dict[str, Embedder] = {}
_LOCAL_MODELS_LOCK = threading.Lock()


def make_embedder(settings: EmbeddingSettings) -> CachedEmbedder:
    """The configured provider behind an LRU cache of its own; the local model loads once per
    process and configuration (shared by every caller), a remote provider connects here."""
    inner: Embedder
    # Imported here so the API never pays for onnxruntime when it embeds through a server,
    # nor for the openai client when it runs the local model.
    if settings.provider == "local":
        inner = _local_model(settings)
    else:
        from shared.embeddings.openai_compat import OpenAIEmbedder

        inner = OpenAIEmbedder(settings)
    return CachedEmbedder(inner, cache_size=settings.cache_size, batch_size=settings.batch_size)


def _local_model(settings: EmbeddingSettings) -> Embedder:
    from shared.embeddings.local_onnx import OnnxMiniLMEmbedder

    # What the model is built from; the cache's size is the CachedEmbedder's, per Runtime.
    key = settings.model_dump_json(include={"model_path", "dim", "batch_size", "threads"})
    with _LOCAL_MODELS_LOCK:
        if key not in _LOCAL_MODELS:
            _LOCAL_MODELS[key] = OnnxMiniLMEmbedder(settings)
        return _LOCAL_MODELS[key]
