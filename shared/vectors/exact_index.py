"""An in-process exact cosine index that mirrors one embedded Qdrant collection.

qdrant-client's local mode re-normalizes every stored vector and fully sorts every score
on each query. Cosine collections already hold unit vectors, so one float32 matrix
product plus np.argpartition gives the same top hits several times faster. The store
keeps this index in step with its own writes; only local modes use it, where this
process owns the data and nothing else can change it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.vectors.base import PayloadFilter, VectorHit

# qdrant-client's local mode leaves vectors shorter than this unnormalized; so do we.
_EPSILON = 1.1920929e-7


class ExactIndex:
    """Ids, a float32 matrix of unit vectors (rows 0..n-1 of a growing buffer) and payloads.

    Not thread-safe: the store calls it under its own lock.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._ids: list[str] = []
        self._rows: dict[str, int] = {}
        self._payloads: list[dict[str, Any]] = []
        self._matrix: npt.NDArray[np.float32] = np.zeros((0, dim), dtype=np.float32)

    def __len__(self) -> int:
        return len(self._ids)

    def upsert(self, points: Iterable[tuple[str, Sequence[float], dict[str, Any]]]) -> None:
        """Replace rows by id, append new ones; vectors are stored unit-normalized."""
        for point_id, vector, payload in points:
            row = np.asarray(vector, dtype=np.float32)
            norm = np.linalg.norm(row)
            if norm > _EPSILON:
                row = row / norm
            index = self._rows.get(point_id)
            if index is None:
                index = len(self._ids)
                self._grow(index + 1)
                self._rows[point_id] = index
                self._ids.append(point_id)
                self._payloads.append(payload)
            else:
                self._payloads[index] = payload
            self._matrix[index] = row

    def delete(self, ids: Iterable[str]) -> None:
        """Remove rows by id (unknown ids are ignored): the last row moves into the hole."""
        for point_id in ids:
            index = self._rows.pop(point_id, None)
            if index is None:
                continue
            last = len(self._ids) - 1
            if index != last:
                moved = self._ids[last]
                self._ids[index] = moved
                self._payloads[index] = self._payloads[last]
                self._matrix[index] = self._matrix[last]
                self._rows[moved] = index
            self._ids.pop()
            self._payloads.pop()

    def search(
        self,
        query: Sequence[float],
        *,
        limit: int,
        score_threshold: float | None,
        payload_filter: PayloadFilter | None,
    ) -> list[VectorHit]:
        """Best cosine first, ties by id; same scores and threshold rule as local Qdrant."""
        n = len(self._ids)
        if n == 0 or limit <= 0:
            return []
        q = np.asarray(query, dtype=np.float32)
        norm = np.linalg.norm(q)
        q = q / (norm if norm != 0.0 else _EPSILON)
        scores = self._matrix[:n] @ q
        keep: npt.NDArray[np.bool_] | None = None
        if payload_filter:
            match = _compile(payload_filter)
            keep = np.fromiter(map(match, self._payloads), dtype=np.bool_, count=n)
        if score_threshold is not None:
            # Local Qdrant keeps only scores strictly above the threshold.
            above = scores > score_threshold
            keep = above if keep is None else keep & above
        candidates = np.arange(n) if keep is None else np.flatnonzero(keep)
        if len(candidates) > limit:
            cand_scores = scores[candidates]
            top = np.argpartition(-cand_scores, limit - 1)[:limit]
            # Take every score tied with the k-th best too, so ties are broken by id alone.
            kth = cand_scores[top].min()
            candidates = candidates[cand_scores >= kth]
        ids, payloads = self._ids, self._payloads
        # Python floats and ints once, then one sort of plain tuples (a key function over
        # numpy scalars cost as much as the matrix product).
        ranked = sorted(
            zip(scores[candidates].tolist(), candidates.tolist(), strict=True),
            key=lambda pair: (-pair[0], ids[pair[1]]),
        )
        return [
            VectorHit(id=ids[i], score=score, payload=_copy_payload(payloads[i]))
            for score, i in ranked[:limit]
        ]

    def _grow(self, size: int) -> None:
        if size > self._matrix.shape[0]:
            bigger = np.zeros((max(size, 2 * self._matrix.shape[0], 64), self.dim), np.float32)
            bigger[: len(self._ids)] = self._matrix[: len(self._ids)]
            self._matrix = bigger


_SCALARS = (str, int, float, bool, type(None))


def _copy_payload(payload: dict[str, Any]) -> dict[str, Any]:
    # Callers may change what they get without touching the index. Payloads are flat
    # scalars in practice, where a shallow copy is that guarantee at a tenth of deepcopy's
    # cost (a context build copies ~80 of them).
    if all(isinstance(v, _SCALARS) for v in payload.values()):
        return dict(payload)
    return copy.deepcopy(payload)


def supports_filter(payload_filter: PayloadFilter | None) -> bool:
    """Whether every key is a plain top-level field (no "a.b" or "a[]" paths)."""
    return not payload_filter or all("." not in key and "[" not in key for key in payload_filter)


def _compile(payload_filter: PayloadFilter) -> Callable[[dict[str, Any]], bool]:
    """One predicate for the whole filter, so each payload costs a few set lookups."""
    # Callers validated the filter (values: str, int, bool, or a list of str or of int).
    wanted = [
        (
            key,
            {
                _tag(o)
                for o in (value if isinstance(value, list | tuple | set | frozenset) else [value])
            },
        )
        for key, value in payload_filter.items()
    ]

    def match(payload: dict[str, Any]) -> bool:
        for key, options in wanted:
            value = payload.get(key, _MISSING)
            if isinstance(value, list):  # like Qdrant: an array matches if an element does
                if not any(_tag(v) in options for v in value):
                    return False
            elif _tag(value) not in options:
                return False
        return True

    return match


_MISSING = object()


def _tag(value: Any) -> tuple[type, Any] | None:
    # Qdrant keeps bool, integer and float apart, while Python has True == 1 == 1.0;
    # tagging each value with its type keeps them apart in a set too.
    # Base types, not type(value): a StrEnum or IntEnum filter value matches its plain value.
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return (kind, kind(value))
    return None  # objects, null, missing: never equal to a filter value
