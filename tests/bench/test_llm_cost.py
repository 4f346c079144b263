"""bench_llm_cost's tiermem side with batches (ADR 0024): the same turns and facts, fewer
calls, each turn's facts counted on it, every call counted by the proxy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.bench_beliefs import load
from bench.bench_llm_cost import DATA, Batching, first_turns, run_tiermem
from bench.token_proxy import TokenProxy
from tests.scripted_llm import ScriptedLLM


@pytest.fixture(name="offline_llm")
def offline_llm_fixture(scripted_llm: ScriptedLLM) -> Iterator[ScriptedLLM]:
    """The scripted server answering each turn with the offline rules' facts, as
    `bench_llm_cost --llm scripted` runs it."""
    scripted_llm.offline_facts = True
    try:
        yield scripted_llm
    finally:
        scripted_llm.offline_facts = False


def test_batches_send_fewer_calls_for_the_same_facts(
    offline_llm: ScriptedLLM, tmp_path: Path
) -> None:
    conversations = first_turns(load(DATA), 12)
    with TokenProxy(offline_llm.base_url) as proxy:
        alone = run_tiermem(conversations, proxy, None, tmp_path / "alone")
        batched = run_tiermem(conversations, proxy, None, tmp_path / "three", Batching(3))

    assert len(alone.turns) == len(batched.turns) == 12
    # One extraction call a turn alone, and the follow-up questions some turns ask about the
    # known facts they touch (ADR 0032: "LEEDS not leicester" asks two); a batch asks none.
    assert all(len(t.calls) >= 1 for t in alone.turns) and len(alone.calls) >= 12
    assert 4 <= len(batched.calls) < 8
    assert all(not t.error for t in alone.turns + batched.turns)
    # The facts each turn added, counted on that turn whichever call extracted it.
    assert [t.facts for t in batched.turns] == [t.facts for t in alone.turns]
    assert sum(t.facts for t in alone.turns) > 0
    prompt = [sum(c.prompt_tokens for c in side.calls) for side in (alone, batched)]
    assert prompt[1] < prompt[0] / 2
    assert batched.name == "tiermem, batches of 3"
