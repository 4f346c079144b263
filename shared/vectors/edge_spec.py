"""What a Qdrant Edge shard is made with: its dimension, layout, vectors and placement, as
a new shard's config and as read back from an existing shard's config file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import qdrant_edge as qe

from shared.errors import PermanentError
from shared.vectors.base import DENSE, SHARED_HNSW, SPARSE, Placement

SHARD_CONFIG = "edge_config.json"  # Edge writes it in every shard folder, before any segment
# "disk": RSS grows with the users searched, not the users stored; "ram": about 1 ms faster
# a search, RSS grows with every vector (ADR 0012).
_PLACEMENT: dict[Placement, str] = {"disk": "cold", "ram": "pinned"}  # vectors and payloads
_MEMORY = {"cold": qe.Memory.Cold, "pinned": qe.Memory.Pinned}
_DATATYPES = {
    "float32": qe.VectorStorageDatatype.Float32,
    "float16": qe.VectorStorageDatatype.Float16,
}


@dataclass(frozen=True)
class ShardSpec:
    """What a shard is made with (`config`), or was, as its config file records it (`read`)."""

    dim: int
    shared: bool  # by many users (partitioned layout): graphs per user, none global
    # Named vectors DENSE and SPARSE (BM25, IDF by the engine): message collections since
    # ADR 0013. Without: one unnamed vector (facts; messages of an earlier tiermem).
    sparse: bool = False
    datatype: str = "float16"  # half the disk and RAM of float32; recall@10 0.9996 (ADR 0012)
    memory: str | None = None
    payload_memory: str | None = None
    sparse_memory: str | None = None

    @classmethod
    def read(cls, folder: Path) -> ShardSpec:
        config = json.loads((folder / SHARD_CONFIG).read_text(encoding="utf-8"))
        vectors = config.get("vectors", {})
        sparse = config.get("sparse_vectors") or {}
        named = isinstance(vectors, dict) and DENSE in vectors and SPARSE in sparse
        if named:
            params = vectors[DENSE]
        else:
            params = vectors.get("") if isinstance(vectors, dict) and "" in vectors else vectors
        if (
            not isinstance(params, dict)
            or params.get("distance") != "Cosine"
            or "size" not in params
        ):
            raise PermanentError(
                f"vector folder {folder} was not created by tiermem (expected one unnamed "
                f"cosine vector, or {DENSE!r} and a {SPARSE!r} sparse vector); remove it or "
                "use another TIERMEM_QDRANT__PATH",
                details={"folder": str(folder)},
            )
        return cls(
            dim=int(params["size"]),
            shared="payload_m" in (config.get("hnsw_config") or {}),
            sparse=named,
            datatype=params.get("datatype", "float32"),
            memory=params.get("memory"),
            payload_memory=config.get("payload_memory"),
            sparse_memory=sparse.get(SPARSE, {}).get("memory") if named else None,
        )

    def made_as_today(self, placement: Placement) -> bool:
        """As `config(placement)` makes a shard now (the engine never moves one made
        otherwise: `compact` rebuilds it)."""
        wanted = _PLACEMENT[placement]
        sparse_memory = self.sparse_memory if self.sparse else wanted
        return (self.datatype, self.memory, self.payload_memory, sparse_memory) == (
            ShardSpec(self.dim, self.shared).datatype,
            wanted,
            wanted,
            wanted,
        )

    def config(self, placement: Placement) -> qe.EdgeConfig:
        memory = _MEMORY[_PLACEMENT[placement]]
        params = qe.EdgeVectorParams(
            size=self.dim,
            distance=qe.Distance.Cosine,
            datatype=_DATATYPES[self.datatype],
            memory=memory,
        )
        hnsw = qe.HnswIndexConfig(**SHARED_HNSW) if self.shared else None
        if not self.sparse:
            return qe.EdgeConfig(vectors=params, hnsw_config=hnsw, payload_memory=memory)
        bm25 = qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=memory)
        return qe.EdgeConfig(
            vectors={DENSE: params},
            sparse_vectors={SPARSE: bm25},
            hnsw_config=hnsw,
            payload_memory=memory,
        )
