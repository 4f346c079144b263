"""The lists fused into one ranking: by score (the engine's words and meaning), by
reciprocal rank (SQL full-text's), and the bonus for a speaker the query names. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from shared.memory.history.words import name_words
from shared.vectors import HybridHits


@dataclass(frozen=True, slots=True)
class Fused:
    message_id: str
    score: float
    keyword_rank: int | None
    vector_rank: int | None
    keyword_score: float | None = None  # BM25 over the best candidate's: 0-1
    vector_score: float | None = None  # cosine
    speaker_named: bool = False


def reciprocal_rank_fusion(
    keyword: Sequence[str], vector: Sequence[str], *, rrf_k: int
) -> list[Fused]:
    """score = Σ 1 / (rrf_k + rank) over the lists holding the id (ranks from 1).

    Ties break toward the better keyword rank (keyword search is the stronger single
    signal on chat histories), then the better vector rank, then the id: deterministic.
    """
    kw, vec = _ranks(keyword), _ranks(vector)
    fused = [
        Fused(
            message_id=mid,
            score=sum(1.0 / (rrf_k + r) for r in (kw.get(mid), vec.get(mid)) if r is not None),
            keyword_rank=kw.get(mid),
            vector_rank=vec.get(mid),
        )
        for mid in dict.fromkeys([*kw, *vec])
    ]
    return _ordered(fused)


def _ranks(ids: Sequence[str]) -> dict[str, int]:
    return {mid: rank for rank, mid in enumerate(dict.fromkeys(ids), start=1)}


def _ordered(fused: list[Fused]) -> list[Fused]:
    missing = 1 << 30  # sorts after any real rank
    fused.sort(
        key=lambda f: (-f.score, f.keyword_rank or missing, f.vector_rank or missing, f.message_id)
    )
    return fused


def fuse_scores(
    found: HybridHits, *, vector_weight: float, fresh: Mapping[str, int] | None = None
) -> list[Fused]:
    """score = BM25 / the best BM25 among the candidates + vector_weight × cosine.

    Scores, not ranks: how far the first hit stands above the tenth is the signal reciprocal
    rank fusion throws away (ADR 0014). `found` ranks the engine's best by words and by
    meaning and scores every candidate of either by both; a candidate it does not score has
    no score there (no word of the query, no dense vector: 0). `fresh`: messages the engine
    does not hold yet, by their rank in SQL full-text, given the engine's keyword score at
    that rank (its last past its end; the best, 1, when it found none) and the lowest cosine
    of the list by meaning (the worker embeds them soon)."""
    fresh = fresh or {}
    best = max([h.score for h in found.sparse[:1]], default=0.0) or 1.0
    by_rank = [h.score / best for h in found.sparse]
    kw_rank, vec_rank = _ranks([h.id for h in found.sparse]), _ranks([h.id for h in found.dense])
    fresh_vec = min((h.score for h in found.dense), default=0.0)
    fused = []
    for mid in dict.fromkeys([*kw_rank, *vec_rank, *fresh]):
        words = found.sparse_scores.get(mid)
        k_score = None if words is None else words / best
        v_score, rank = found.dense_scores.get(mid), kw_rank.get(mid)
        if mid in fresh and rank is None:  # indexed meanwhile: the engine's score stands
            rank = fresh[mid]
            k_score = by_rank[min(rank, len(by_rank)) - 1] if by_rank else 1.0
        cosine = v_score if v_score is not None else fresh_vec if mid in fresh else 0.0
        fused.append(
            Fused(
                message_id=mid,
                score=(k_score or 0.0) + vector_weight * cosine,
                keyword_rank=rank,
                vector_rank=vec_rank.get(mid),
                keyword_score=k_score,
                vector_score=v_score,
            )
        )
    return _ordered(fused)


def with_speakers_named(
    fused: Sequence[Fused], speakers: Mapping[str, str | None], query: str, *, bonus: float
) -> list[Fused]:
    """Candidates whose speaker the query names ("What did Caroline research?") rise by
    `bonus`: the question is about what that person said, and the words of the name itself
    mostly match messages addressed to them. Candidates not in `speakers` (deleted since
    the engine answered) are dropped."""
    asked = name_words(query) if bonus else set()
    named: dict[str | None, bool] = {None: False}  # per speaker: a few in a history
    out = []
    for f in fused:
        if f.message_id not in speakers:
            continue
        speaker = speakers[f.message_id]
        if speaker not in named:
            named[speaker] = bool(asked & name_words(speaker or ""))
        if named[speaker]:
            f = replace(f, score=f.score + bonus, speaker_named=True)
        out.append(f)
    return _ordered(out) if asked else out
