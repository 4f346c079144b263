"""The loop, pure: every tier fits, spans partition the messages, and it ends within its bound."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.compression.budget import SPLIT_TIERS, SUMMARY_LABEL, label_overhead
from shared.compression.engine import compress, plan_bulks
from shared.compression.offline import OfflineSummarizer
from shared.compression.spans import partition_problems
from shared.compression.summary import Summarizer
from shared.compression.tiers import (
    CompressionResult,
    StaleState,
    Step,
    TierState,
    budget_for,
    over_budget,
)
from shared.config import CompressionSettings
from tests.compression.helpers import DECISION, Misbehaving, WellBehaved, state_of, text_of

OFFLINE = OfflineSummarizer()


@st.composite
def configs(draw: st.DrawFn) -> CompressionSettings:
    target = draw(st.floats(0.1, 0.85))
    trigger = draw(st.floats(min(target + 0.01, 1.0), 1.0))
    if not trigger > target:
        trigger = min(1.0, target + 0.05)
    a, b = sorted(draw(st.lists(st.floats(0, 1), min_size=2, max_size=2)))
    current, topics = round(a, 6), round(b - a, 6)
    return CompressionSettings(
        context_limit_tokens=draw(st.integers(40, 6000)),
        target_ratio=target,
        trigger_ratio=trigger,
        current_share=current,
        topics_share=topics,
        bulks_share=max(0.0, round(1 - current - topics, 6)),
        pin_head=draw(st.booleans()),
        head_max_share=draw(st.floats(0, 0.5)),
        chunk_max_tokens=draw(st.integers(50, 4000)),
        min_summary_tokens=draw(st.integers(1, 40)),
        max_summary_tokens=draw(st.integers(40, 600)),
        topic_ratio=draw(st.floats(0.05, 0.9)),
        bulk_ratio=draw(st.floats(0.05, 0.9)),
    )


def iteration_bound(n_messages: int) -> int:
    """Each current step removes ≥1 message, each topics step ≥1 topic entry, each bulk merge
    ≥1 bulk entry (at most n of each ever exist), and a lone bulk is re-compressed at most
    three times in a row."""
    return 6 * n_messages + 10


def run(state: TierState, cfg: CompressionSettings, summarizer: Summarizer) -> CompressionResult:
    steps: list[Step] = []
    result = compress(
        state,
        config=cfg,
        summarizer=summarizer,
        fallback=OFFLINE,
        force=True,
        on_step=steps.append,
    )
    # Every intermediate state is sound, not just the last one.
    for step in steps:
        assert not partition_problems(
            step.after.spans_in_order(),
            session_id="s",
            message_seqs=range(len(state.current)),
        ), step.record
    return result


def check(state: TierState, cfg: CompressionSettings, result: CompressionResult) -> None:
    out, stats = result.state, result.stats
    n = len(state.current)
    assert stats.iterations <= cfg.max_iterations
    assert not partition_problems(out.spans_in_order(), session_id="s", message_seqs=range(n))
    assert stats.status in ("done", "cannot_fit"), (stats.status, stats.detail)
    budget = budget_for(out, cfg)
    if stats.status == "done":
        assert over_budget(out, budget) == []
        assert out.history_cost(budget.reserve) <= budget.target
        for tier in SPLIT_TIERS:
            assert out.cost(tier) <= budget.of(tier)
    else:  # reported only when the oldest history cannot shrink any further
        assert out.cost("bulks") > budget.bulks
        assert plan_bulks(out, budget, cfg) is None
        # ... which takes one summary at its floor, or too little text for any summary
        assert (len(out.bulks) == 1 and out.bulks[0].tokens <= cfg.min_summary_tokens) or (
            sum(e.cost for e in out.bulks) - label_overhead(SUMMARY_LABEL) - 2 < 1
        )
    for record in stats.steps:
        if record["kind"] == "summarize":
            assert record["tokens_out"] < record["tokens_in"], record
    for entry in (*out.bulks, *out.topics):
        assert entry.text.strip()
    assert stats.tokens_after <= stats.tokens_before


messages = st.lists(st.integers(1, 250), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=messages, cfg=configs(), seed=st.integers(0, 1000))
def test_well_behaved_summarizer_fits_every_tier(
    lengths: list[int], cfg: CompressionSettings, seed: int
) -> None:
    cfg = cfg.model_copy(update={"max_iterations": iteration_bound(len(lengths))})
    state = state_of([text_of(n, seed + i) for i, n in enumerate(lengths)])
    check(state, cfg, run(state, cfg, WellBehaved()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=messages,
    cfg=configs(),
    seed=st.integers(0, 1000),
    modes=st.lists(st.sampled_from(Misbehaving.MODES), min_size=1, max_size=6),
)
def test_misbehaving_summarizer_falls_back_and_still_fits(
    lengths: list[int], cfg: CompressionSettings, seed: int, modes: list[str]
) -> None:
    cfg = cfg.model_copy(update={"max_iterations": iteration_bound(len(lengths))})
    state = state_of([text_of(n, seed + i) for i, n in enumerate(lengths)])
    result = run(state, cfg, Misbehaving(tuple(modes)))
    check(state, cfg, result)
    summarized = [r for r in result.stats.steps if r["kind"] == "summarize"]
    if set(modes) <= {"too_long", "empty", "error", "raise", "whitespace"}:
        assert result.stats.fallbacks == len(summarized)
        assert all(r.get("summarizer") == "offline" for r in summarized)


@settings(max_examples=60, deadline=None)
@given(lengths=messages, cfg=configs(), bound=st.integers(1, 4))
def test_the_loop_stops_at_its_bound_and_leaves_a_sound_state(
    lengths: list[int], cfg: CompressionSettings, bound: int
) -> None:
    cfg = cfg.model_copy(update={"max_iterations": bound})
    state = state_of([text_of(n, i) for i, n in enumerate(lengths)])
    result = run(state, cfg, WellBehaved())
    assert result.stats.iterations <= bound
    assert result.stats.status in ("done", "cannot_fit", "partial")
    assert not partition_problems(
        result.state.spans_in_order(), session_id="s", message_seqs=range(len(lengths))
    )


def long_session(n: int = 120) -> TierState:
    return state_of(long_texts(n))


def long_texts(n: int) -> list[str]:
    return [DECISION if i == 4 else text_of(40 + (i * 7) % 60, i) for i in range(n)]


def grow(
    texts: list[str], cfg: CompressionSettings, summarizer: Summarizer
) -> list[CompressionResult]:
    """A session as it happens: one message at a time, the loop after each (above the
    trigger only). Returns the runs that did something."""
    full = state_of(texts)
    state = TierState(chat_id="s")
    runs = []
    for message in full.current:
        state = dataclasses.replace(state, current=(*state.current, message))
        result = compress(state, config=cfg, summarizer=summarizer, fallback=OFFLINE)
        if result.stats.status != "below_trigger":
            runs.append(result)
        state = result.state
        budget = budget_for(state, cfg)
        assert state.history_cost(budget.reserve) <= budget.trigger
    return runs


def test_below_the_trigger_nothing_happens() -> None:
    state = state_of(["hello there", "hi"])
    cfg = CompressionSettings(context_limit_tokens=10_000)
    result = compress(state, config=cfg, summarizer=WellBehaved(), fallback=OFFLINE)
    assert result.stats.status == "below_trigger" and result.state == state


def test_tiers_follow_the_shares_and_the_head_is_pinned() -> None:
    cfg = CompressionSettings(context_limit_tokens=3000)
    runs = grow(long_texts(120), cfg, WellBehaved())
    assert len(runs) > 3 and all(r.stats.status == "done" for r in runs)
    for r in runs:  # after every run the history is back under the target
        assert r.stats.tokens_after <= r.budget.target
    out, budget = runs[-1].state, runs[-1].budget
    assert [e.id for e in out.head] == ["m0", "m1"]  # the first exchange, verbatim
    assert budget.current == int(budget.split * 0.5)
    assert out.cost("current") > budget.current * 0.5  # the newest half stays verbatim
    assert out.bulks and out.topics
    assert all(e.kind == "summary" for e in (*out.bulks, *out.topics))


def test_pin_head_can_be_turned_off() -> None:
    cfg = CompressionSettings(context_limit_tokens=3000, pin_head=False)
    result = compress(long_session(), config=cfg, summarizer=WellBehaved(), fallback=OFFLINE)
    assert result.state.head == () and result.state.head_decided


def test_offline_summaries_keep_an_early_decision_into_the_bulks() -> None:
    cfg = CompressionSettings(context_limit_tokens=3000, pin_head=False)
    runs = grow(long_texts(160), cfg, OFFLINE)
    final = runs[-1].state
    assert final.bulks[0].level >= 3  # re-compressed more than once
    assert "PostgreSQL" in final.bulks[0].text
    assert sum(r.stats.llm_calls for r in runs) == 0


def test_a_session_whose_minimum_cannot_fit_is_reported_not_looped() -> None:
    cfg = CompressionSettings(
        context_limit_tokens=60,
        target_ratio=0.5,
        trigger_ratio=0.6,
        min_summary_tokens=30,
        pin_head=False,
    )
    result = compress(long_session(30), config=cfg, summarizer=WellBehaved(), fallback=OFFLINE)
    assert result.stats.status == "cannot_fit"
    assert "bulks_share" in (result.stats.detail or "")
    assert result.stats.iterations < iteration_bound(30)


def test_a_stale_step_stops_the_run_where_it_was() -> None:
    cfg = CompressionSettings(context_limit_tokens=3000)
    seen: list[Step] = []

    def on_step(step: Step) -> None:
        if len(seen) == 2:
            raise StaleState("version moved")
        seen.append(step)

    result = compress(
        long_session(), config=cfg, summarizer=WellBehaved(), fallback=OFFLINE, on_step=on_step
    )
    assert result.stats.status == "stale" and result.state == seen[-1].after


def test_stats_count_calls_fallbacks_and_the_summarizer_time() -> None:
    cfg = CompressionSettings(context_limit_tokens=3000)
    summarizer = Misbehaving(("too_long", "ok"))
    result = compress(long_session(), config=cfg, summarizer=summarizer, fallback=OFFLINE)
    stats = result.stats
    assert stats.llm_calls == summarizer.calls
    assert stats.fallbacks == sum(1 for r in stats.steps if "fallback" in r) >= 1
    assert stats.tokens_after < stats.tokens_before
    assert stats.summarizer_input_tokens > stats.summarizer_output_tokens > 0
    assert stats.engine_ms >= 0 and stats.total_ms >= stats.summarizer_ms


@pytest.mark.parametrize(
    "overrides",
    [
        {"current_share": 0.6},  # shares sum to 1.1
        {"target_ratio": 0.8, "trigger_ratio": 0.7},
        {"trigger_ratio": 1.2},
        {"min_summary_tokens": 900, "max_summary_tokens": 100},
    ],
)
def test_settings_are_validated(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CompressionSettings(**overrides)
