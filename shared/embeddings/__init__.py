"""Text embeddings: the Embedder protocol, its providers, and the factory that picks one."""

from __future__ import annotations

from shared.config import EmbeddingSettings
from shared.embeddings.base import CachedEmbedder, Embedder, Vectors, l2_normalize

__all__ = ["CachedEmbedder", "Embedder", "Vectors", "l2_normalize", "make_embedder"]


def make_embedder(settings: EmbeddingSettings) -> CachedEmbedder:
    """The configured provider behind an LRU cache; the provider loads (or connects) here."""
    inner: Embedder
    # Imported here so the API never pays for onnxruntime when it embeds through a server,
    # nor for the openai client when it runs the local model.
    if settings.provider == "local":
        from shared.embeddings.local_onnx import OnnxMiniLMEmbedder

        inner = OnnxMiniLMEmbedder(settings)
    else:
        from shared.embeddings.openai_compat import OpenAIEmbedder

        inner = OpenAIEmbedder(settings)
    return CachedEmbedder(inner, cache_size=settings.cache_size, batch_size=settings.batch_size)
