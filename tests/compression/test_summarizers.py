"""The two summarizers: offline extractive (bounded, deterministic) and LLM (structured output)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.compression.llm import SMALL_TALK, LLMSummarizer
from shared.compression.offline import LABEL, OfflineSummarizer, truncate_tokens
from shared.compression.summary import SummaryItem, SummaryRequest
from shared.config import LLMSettings
from shared.tokens import count_tokens
from tests.scripted_llm import ScriptedLLM

CONVERSATION = (
    SummaryItem("Ana", "Hi! Thanks for yesterday."),
    SummaryItem("Assistant", "You're welcome. How is the migration going?"),
    SummaryItem("Ana", "We decided to use PostgreSQL 16 for billing. The budget is 4000 EUR."),
    SummaryItem("Assistant", "Great. Anything else?"),
    SummaryItem("Ana", "The launch deadline is 3 May and we must not touch the legacy API."),
    SummaryItem("Ana", "I still need to ask Bo about the backups. lol ok"),
    SummaryItem("Assistant", "Sounds good."),
)


def request(max_tokens: int, items: tuple[SummaryItem, ...] = CONVERSATION) -> SummaryRequest:
    return SummaryRequest(level="topic", items=items, max_tokens=max_tokens)


def test_offline_keeps_decisions_constraints_and_dates_and_drops_chatter() -> None:
    out = OfflineSummarizer().summarize(request(60))
    assert out.summarizer == "offline" and out.llm_calls == 0
    assert out.text.startswith(LABEL)
    assert "PostgreSQL 16" in out.text and "3 May" in out.text
    assert "Thanks for yesterday" not in out.text and "Sounds good" not in out.text
    assert count_tokens(out.text) <= 60


def test_offline_puts_decisions_first_when_space_is_short() -> None:
    out = OfflineSummarizer().summarize(request(24))
    assert "PostgreSQL" in out.text
    assert count_tokens(out.text) <= 24


def test_offline_is_deterministic_and_focus_moves_sentences_up() -> None:
    a = OfflineSummarizer().summarize(request(30))
    assert a == OfflineSummarizer().summarize(request(30))
    focused = OfflineSummarizer().summarize(
        SummaryRequest(level="topic", items=CONVERSATION, max_tokens=30, focus="backups Bo")
    )
    assert "backups" in focused.text


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(min_size=1, max_size=400), min_size=1, max_size=8),
    max_tokens=st.integers(1, 200),
)
def test_offline_output_is_within_max_tokens_and_shorter_than_its_input(
    texts: list[str], max_tokens: int
) -> None:
    items = tuple(SummaryItem("Ana", t) for t in texts)
    input_tokens = sum(count_tokens(t) for t in texts)
    out = OfflineSummarizer().summarize(request(max_tokens, items))
    assert out.text
    assert count_tokens(out.text) <= max(1, min(max_tokens, input_tokens - 1))


def test_truncate_tokens_never_exceeds() -> None:
    text = "é🙂 naïve façade " * 50
    for n in (1, 2, 5, 17, 100):
        assert count_tokens(truncate_tokens(text, n)) <= n


SUMMARY = {
    "topic": "billing migration",
    "decisions": ["Ana's team uses PostgreSQL 16 for billing."],
    "constraints": ["Budget 4000 EUR.", "Launch by 3 May; do not touch the legacy API."],
    "open_items": ["Ask Bo about backups."],
    "facts": [],
}


def llm(scripted: ScriptedLLM) -> LLMSummarizer:
    return LLMSummarizer(LLMSettings(base_url=scripted.base_url, timeout_s=5))


def test_llm_summary_is_structured_and_rendered(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script("Summarize this part", SUMMARY)
    out = llm(scripted_llm).summarize(request(80))
    assert out.error is None and out.llm_calls == 1 and out.prompt_tokens > 0
    assert out.text.splitlines() == [
        "Topic: billing migration",
        "Decisions: Ana's team uses PostgreSQL 16 for billing.",
        "Constraints: Budget 4000 EUR.; Launch by 3 May; do not touch the legacy API.",
        "Open items: Ask Bo about backups.",
    ]
    sent = scripted_llm.chat_requests()[-1]
    prompt = sent["messages"][-1]["content"]
    assert "under 80 tokens" in prompt and "for the topic tier" in prompt
    assert "Ana: We decided to use PostgreSQL 16" in prompt
    assert sent["max_tokens"] == 2 * 80 + 64  # the reply is capped too
    assert sent["response_format"]["json_schema"]["name"] == "tier_summary"


def test_llm_empty_summary_reads_as_small_talk(scripted_llm: ScriptedLLM) -> None:
    empty = {
        "topic": "greetings",
        "decisions": [],
        "constraints": [],
        "open_items": [],
        "facts": [],
    }
    scripted_llm.script("Summarize this part", empty)
    assert llm(scripted_llm).summarize(request(40)).text == SMALL_TALK


def test_llm_failures_come_back_as_errors_for_the_fallback(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script("Summarize this part", SUMMARY)
    scripted_llm.misbehave("500")
    failed = llm(scripted_llm).summarize(request(80))
    assert failed.error and failed.error.startswith("transient") and failed.llm_calls == 1
    scripted_llm.misbehave("malformed", times=2)
    malformed = llm(scripted_llm).summarize(request(80))
    assert malformed.error and "llm_malformed_output" in malformed.error
    assert malformed.llm_calls == 2
    scripted_llm.script("Summarize this part", json.dumps({"topic": 3}))
    bad = llm(scripted_llm).summarize(request(80))
    assert bad.error is not None  # missing lists: not the schema, even after a repair
