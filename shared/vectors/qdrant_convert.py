"""Between the VectorStore's types and qdrant-client's models: points, hits, payload filters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qdrant_client import models as qm

from shared.vectors.base import DENSE, SPARSE, CheckedPoint, PayloadFilter, VectorHit, filter_terms


def to_struct(point: CheckedPoint, sparse: bool) -> qm.PointStruct:
    if not sparse:
        assert point.dense is not None  # fitted() keeps only points with one
        return qm.PointStruct(id=point.id, vector=point.dense, payload=point.payload)
    named: dict[str, Any] = {}
    if point.dense is not None:
        named[DENSE] = point.dense
    if point.sparse is not None:
        named[SPARSE] = qm.SparseVector(indices=point.sparse.indices, values=point.sparse.values)
    return qm.PointStruct(id=point.id, vector=named, payload=point.payload)


def to_hits(points: Sequence[qm.ScoredPoint]) -> list[VectorHit]:
    return [VectorHit(id=str(p.id), score=float(p.score), payload={}) for p in points]


def to_filter(
    payload_filter: PayloadFilter | None,
    *,
    exclude: PayloadFilter | None = None,
    has_ids: Sequence[str] = (),
) -> qm.Filter | None:
    if not payload_filter and not exclude and not has_ids:
        return None
    must: list[qm.Condition] = [qm.HasIdCondition(has_id=list(has_ids))] if has_ids else []
    must += _conditions(payload_filter)
    return qm.Filter(must=must or None, must_not=_conditions(exclude) or None)


def _conditions(payload_filter: PayloadFilter | None) -> list[qm.Condition]:
    return [
        qm.FieldCondition(
            key=key, match=qm.MatchAny(any=value) if several else qm.MatchValue(value=value)
        )
        for key, value, several in filter_terms(payload_filter or {})
    ]
