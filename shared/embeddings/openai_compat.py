"""Embeddings from any OpenAI-compatible /v1/embeddings endpoint (OpenAI, vLLM, llama.cpp)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import openai
from openai.types import CreateEmbeddingResponse

from shared.config import EmbeddingSettings
from shared.embeddings.base import Vectors, empty, l2_normalize
from shared.errors import PermanentError, TransientError

# Statuses worth another try later; everything else (400, 401, 403, 404, 422) needs a person.
_TRANSIENT_STATUSES = frozenset({408, 429})


class OpenAIEmbedder:
    """Batches texts to the endpoint and maps its failures onto TransientError / PermanentError."""

    def __init__(
        self, settings: EmbeddingSettings, *, timeout_s: float = 30.0, max_retries: int = 0
    ) -> None:
        if settings.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.name = f"openai:{settings.model}"
        self.dim = settings.dim
        self.model = settings.model
        self.batch_size = settings.batch_size
        # No retries in the client by default: workers retry TransientError with backoff
        # and jitter, and two retry layers multiply the wait a caller sees.
        self._client = openai.OpenAI(
            base_url=settings.base_url,  # None → the client's default, api.openai.com
            api_key=settings.api_key,
            timeout=timeout_s,
            max_retries=max_retries,
        )

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return empty(self.dim)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            out[start : start + len(chunk)] = self._embed_batch(chunk)
        return out

    def _embed_batch(self, texts: list[str]) -> Vectors:
        try:
            # "float" because every compatible server speaks it; the client's own default,
            # base64, is not supported everywhere.
            response = self._client.embeddings.create(
                model=self.model, input=texts, encoding_format="float"
            )
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise TransientError(
                f"embedding endpoint unreachable: {exc}",
                details={"model": self.model, "kind": type(exc).__name__},
            ) from exc
        except openai.APIStatusError as exc:
            details = {"model": self.model, "status": exc.status_code}
            if exc.status_code in _TRANSIENT_STATUSES or exc.status_code >= 500:
                raise TransientError(
                    f"embedding endpoint answered {exc.status_code}; retry later", details=details
                ) from exc
            raise PermanentError(
                f"embedding endpoint refused the request ({exc.status_code}): {exc.message}; "
                "check TIERMEM_EMBEDDINGS__BASE_URL, __API_KEY and __MODEL",
                details=details,
            ) from exc
        except (openai.APIError, json.JSONDecodeError) as exc:  # a body the client could not read
            raise self._malformed(exc) from exc
        return self._vectors(response, len(texts))

    def _vectors(self, response: CreateEmbeddingResponse, count: int) -> Vectors:
        # The client builds response objects without validating them, so a server that
        # answers 200 with the wrong shape surfaces here as attribute/type errors.
        try:
            data = sorted(response.data, key=lambda item: item.index)
            widths = {len(item.embedding) for item in data}
        except (AttributeError, TypeError) as exc:
            raise self._malformed(exc) from exc
        if len(data) != count:
            raise PermanentError(
                f"embedding endpoint returned {len(data)} vectors for {count} texts",
                details={"model": self.model},
            )
        if widths != {self.dim}:
            got = ", ".join(str(w) for w in sorted(widths))
            raise PermanentError(
                f"model {self.model} returns {got}-dim vectors but TIERMEM_EMBEDDINGS__DIM is "
                f"{self.dim}; set TIERMEM_EMBEDDINGS__DIM to the model's width (vectors of "
                "another width need new collections)",
                details={"model": self.model, "configured_dim": self.dim, "returned_dims": got},
            )
        try:
            rows = np.array([item.embedding for item in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise self._malformed(exc) from exc
        return l2_normalize(rows)

    def _malformed(self, exc: Exception) -> PermanentError:
        return PermanentError(
            f"embedding endpoint sent a malformed response ({type(exc).__name__}: {exc})",
            details={"model": self.model},
        )
