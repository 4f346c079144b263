"""Context assembly: never over budget, deterministic, superseded and quarantined never shown."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import Session, col, select

from shared.db.migrate import upgrade_to_head
from shared.db.models import ExtractionRun, Message, Tenant
from shared.flows.build_context import build_context
from shared.flows.extract_turn import run_extraction
from shared.records.ingest import NewMessage, ingest_messages
from shared.records.tenancy import ensure_dev_tenant
from shared.runtime import Runtime
from shared.tokens import count_tokens
from tests.factories import make_settings

TURNS = [
    ("s-old", "I live in Berlin and I work as a nurse.", "Good to know."),
    ("s-old", "My sister Maria lives nearby. I love jazz and I hate cilantro.", "Noted!"),
    ("s-old", "I decided to learn Rust because our services need speed.", "Great choice."),
    ("s-old", "My goal is to run a marathon by next June.", "You can do it."),
    ("s-old", "I have a dog named Rex. He chewed the sofa yesterday.", "Oh no, Rex!"),
    ("s-new", "I moved to Lisbon last month.", "How exciting."),
    ("s-new", "I prefer tea over coffee in the morning.", "Tea it is."),
    ("s-new", "Can you help me plan a trip for the weekend?", "Sure, where to?"),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runtime, str]]:
    """One user with two sessions of history, extracted by the offline extractor in-process."""
    settings = make_settings(Path(tmp_path_factory.mktemp("ctx")), qdrant={"in_memory": True})
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    with Session(runtime.engine) as session:
        ensure_dev_tenant(session=session, settings=settings)
        tenant_id = session.exec(select(Tenant.id)).one()
        start = dt.datetime(2024, 5, 1, 9, 0, tzinfo=dt.UTC)
        for i, (session_id, user_text, reply) in enumerate(TURNS):
            when = start + dt.timedelta(days=i)
            ingest_messages(
                session=session,
                settings=settings,
                tenant_id=tenant_id,
                user_external_id="ana",
                session_external_id=session_id,
                extractor="offline",
                messages=[
                    NewMessage("user", user_text, "Ana", created_at=when),
                    NewMessage("assistant", reply, "Assistant", created_at=when),
                ],
            )
        session.commit()
        # in the order the turns were said: a later move supersedes an earlier address
        run_ids = session.exec(
            select(ExtractionRun.id)
            .join(Message, col(Message.id) == ExtractionRun.message_id)
            .order_by(col(Message.created_at))
        ).all()
    for run_id in run_ids:
        run_extraction(runtime, run_id)
    yield runtime, tenant_id
    runtime.close()


def ctx(
    world: tuple[Runtime, str], *, query: str | None, budget: int | None, session_id: str = "s-new"
):  # type: ignore[no-untyped-def]
    runtime, tenant_id = world
    with Session(runtime.engine) as session:
        return build_context(
            runtime=runtime,
            session=session,
            tenant_id=tenant_id,
            user_external_id=None,
            session_external_id=session_id,
            query=query,
            budget_tokens=budget,
        )


@pytest.mark.parametrize("budget", [0, 1, 3, 10, 25, 60, 120, 250, 500, 1000, 4000, 100_000])
def test_never_over_budget_and_count_is_exact(world: tuple[Runtime, str], budget: int) -> None:
    result = ctx(world, query="Where does Ana live and what does she like?", budget=budget)
    assert result.token_count <= budget
    assert result.token_count == count_tokens(result.system_prompt)
    if budget >= 4000:  # everything fits
        assert result.memories and result.history
        assert len(result.history) == 6  # s-new: 3 turns, verbatim


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    budget=st.integers(min_value=0, max_value=3000),
    query=st.sampled_from(["jazz", "Where does Ana live?", "", "dog sofa", "!!! ???"]),
)
def test_budget_property(world: tuple[Runtime, str], budget: int, query: str) -> None:
    result = ctx(world, query=query, budget=budget)
    assert result.token_count <= budget
    assert result.token_count == count_tokens(result.system_prompt)


def test_deterministic(world: tuple[Runtime, str]) -> None:
    a = ctx(world, query="What music does Ana like?", budget=800)
    b = ctx(world, query="What music does Ana like?", budget=800)
    assert a.system_prompt == b.system_prompt and a.model_dump() == b.model_dump()


def test_superseded_fact_is_never_shown(world: tuple[Runtime, str]) -> None:
    result = ctx(world, query="Which city does Ana live in?", budget=4000)
    everything = result.system_prompt
    assert "Lisbon" in everything
    assert "Ana lives in Berlin" not in everything  # superseded by the move to Lisbon
    contents = [m.content for group in result.memories.values() for m in group]
    assert not any("lives in Berlin" in c for c in contents)


def test_memories_grouped_by_type_newest_first(world: tuple[Runtime, str]) -> None:
    result = ctx(world, query="Tell me about Ana", budget=4000)
    assert set(result.memories) <= {
        "identity",
        "relationship",
        "preference",
        "goal",
        "decision",
        "fact",
    }
    for items in result.memories.values():
        dates = [m.date for m in items]
        assert dates == sorted(dates, reverse=True)
    assert "## What you know about Ana" in result.system_prompt


def test_small_budget_keeps_the_newest_history(world: tuple[Runtime, str]) -> None:
    result = ctx(world, query="", budget=60)
    if result.history:
        assert result.history[-1].content == "Sure, where to?"


def test_earlier_messages_come_from_other_sessions(world: tuple[Runtime, str]) -> None:
    result = ctx(world, query="What happened with Rex and the sofa?", budget=4000)
    assert result.earlier_messages, result.system_prompt
    assert all(h.session_id == "s-old" for h in result.earlier_messages)
    assert any("sofa" in h.content for h in result.earlier_messages)
    assert all(h.message_id for h in result.earlier_messages)


def test_chat_messages_end_with_history(world: tuple[Runtime, str]) -> None:
    result = ctx(world, query="trip", budget=4000)
    assert result.messages[0].role == "system"
    assert [m.role for m in result.messages[1:]] == ["user", "assistant"] * 3


def test_a_new_session_spends_the_history_share_on_earlier_messages(
    world: tuple[Runtime, str],
) -> None:
    """A session with no history of its own leaves the history's share of the budget to the
    earlier messages; a session with history keeps what its history needs of it."""
    runtime, tenant_id = world
    query, budget = "What did Ana say about Rex, the sofa, the trip and Lisbon?", 500
    with Session(runtime.engine) as session:
        fresh = build_context(
            runtime=runtime,
            session=session,
            tenant_id=tenant_id,
            user_external_id="ana",
            session_external_id="s-not-started",
            query=query,
            budget_tokens=budget,
        )
    ongoing = ctx(world, query=query, budget=budget)
    cfg = runtime.settings.context
    old_cap = int(budget * (cfg.earlier_messages_share + cfg.memories_share))
    assert not fresh.history and ongoing.history
    fresh_earlier = fresh.section_tokens["earlier_messages"]
    assert fresh.section_tokens["memories"] + fresh_earlier > old_cap
    assert len(fresh.earlier_messages) > len(ongoing.earlier_messages)
    assert len(ongoing.history) == 6  # its whole history still fits: it needs that much
    assert fresh.token_count <= budget and ongoing.token_count <= budget
