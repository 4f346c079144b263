"""History search's fusion, on its own: reciprocal rank fusion, fusion by score (the
engine's BM25 and cosine, and messages it does not hold yet), the named speaker's bonus."""

from __future__ import annotations

import pytest

from shared.memory.history.fusion import (
    Fused,
    fuse_scores,
    reciprocal_rank_fusion,
    with_speakers_named,
)
from shared.vectors import HybridHits, VectorHit


def test_reciprocal_rank_fusion_scores_and_breaks_ties_deterministically() -> None:
    fused = reciprocal_rank_fusion(["a", "b", "c"], ["c", "d", "a"], rrf_k=60)
    by_id = {f.message_id: f for f in fused}
    assert by_id["a"].score == pytest.approx(1 / 61 + 1 / 63)
    assert (by_id["c"].keyword_rank, by_id["c"].vector_rank) == (3, 1)
    assert [f.message_id for f in fused] == ["a", "c", "b", "d"]
    # b (keyword 2) and d (vector 2) tie on score: the keyword rank wins, then the id.
    assert by_id["b"].score == by_id["d"].score
    assert [f.message_id for f in reciprocal_rank_fusion(["y"], ["x"], rrf_k=60)] == ["y", "x"]
    assert [f.message_id for f in reciprocal_rank_fusion([], ["y", "x"], rrf_k=60)] == ["y", "x"]
    assert reciprocal_rank_fusion([], [], rrf_k=60) == []


def test_a_named_speaker_lifts_their_messages_by_the_bonus() -> None:
    fused = [
        Fused("to-maya", 1.9, 1, 1, 1.0, 0.6),  # "Maya, are you coming?" — says her name
        Fused("by-maya", 1.85, 2, 2, 0.9, 0.63),  # what she said
        Fused("gone", 1.8, 3, 3, 0.8, 0.67),  # deleted since the engine answered
    ]
    speakers = {"to-maya": "Tom", "by-maya": "Maya Lindqvist"}
    lifted = with_speakers_named(fused, speakers, "What did Maya's team bake?", bonus=0.1)
    assert [f.message_id for f in lifted] == ["by-maya", "to-maya"]
    assert lifted[0].speaker_named and lifted[0].score == pytest.approx(1.95)
    assert not lifted[1].speaker_named and lifted[1].score == 1.9
    # no name in the query, or no bonus: the order stands
    assert [f.message_id for f in with_speakers_named(fused, speakers, "bake", bonus=0.1)] == [
        "to-maya",
        "by-maya",
    ]
    assert not any(f.speaker_named for f in with_speakers_named(fused, speakers, "Maya", bonus=0))


def _hits(*scored: tuple[str, float]) -> list[VectorHit]:
    return [VectorHit(id=mid, score=score, payload={}) for mid, score in scored]


def test_fusion_by_score_adds_bm25_over_the_best_and_weighted_cosine() -> None:
    found = HybridHits(
        dense=_hits(("b", 0.8), ("c", 0.5)),
        sparse=_hits(("a", 4.0), ("b", 2.0)),
        dense_scores={"a": 0.2, "b": 0.8, "c": 0.5},
        sparse_scores={"a": 4.0, "b": 2.0},
    )
    fused = fuse_scores(found, vector_weight=1.0)
    by_id = {f.message_id: f for f in fused}
    assert [f.message_id for f in fused] == ["b", "a", "c"]  # 1.3, 1.2, 0.5
    assert by_id["a"].score == pytest.approx(1.0 + 0.2)
    assert by_id["b"].score == pytest.approx(0.5 + 0.8)
    assert (by_id["b"].keyword_rank, by_id["b"].vector_rank) == (2, 1)
    # no word of the query: no keyword score, only its weighted cosine
    assert by_id["c"].keyword_score is None and by_id["c"].score == pytest.approx(0.5)


def test_a_message_not_indexed_yet_takes_the_scores_at_its_full_text_rank() -> None:
    found = HybridHits(
        dense=_hits(("b", 0.8), ("c", 0.5)),
        sparse=_hits(("a", 4.0), ("b", 2.0)),
        dense_scores={"a": 0.2, "b": 0.8, "c": 0.5},
        sparse_scores={"a": 4.0, "b": 2.0},
    )
    fused = {f.message_id: f for f in fuse_scores(found, vector_weight=1.0, fresh={"new": 2})}
    # the engine's keyword score at rank 2 (2.0 / 4.0) and the lowest cosine by meaning
    assert fused["new"].keyword_rank == 2 and fused["new"].keyword_score == pytest.approx(0.5)
    assert fused["new"].vector_score is None and fused["new"].score == pytest.approx(0.5 + 0.5)
    # past the end of the engine's list: its last score; the engine found none: the best
    past = fuse_scores(found, vector_weight=1.0, fresh={"new": 9})
    assert {f.message_id: f for f in past}["new"].keyword_score == pytest.approx(0.5)
    alone = fuse_scores(HybridHits(dense=[], sparse=[]), vector_weight=1.0, fresh={"new": 1})
    assert [(f.message_id, f.score) for f in alone] == [("new", 1.0)]
