"""The LLM summarizer: structured output (decisions, constraints, open items, facts) as text."""

from __future__ import annotations

from typing import Any

from shared.compression.prompts import SUMMARY_SCHEMA, SUMMARY_SECTIONS, build_summary_messages
from shared.compression.summary import SummaryOutput, SummaryRequest
from shared.config import LLMSettings
from shared.errors import DomainError
from shared.llm.client import LLMClient, MalformedOutput

SMALL_TALK = "Small talk only."


def render_summary(data: dict[str, Any]) -> str:
    """The summary as the context shows it: one line per non-empty section."""
    lines: list[str] = []
    for key, title in SUMMARY_SECTIONS:
        items = data.get(key)
        if not isinstance(items, list):
            continue
        kept = [str(i).strip().rstrip(";") for i in items if isinstance(i, str) and i.strip()]
        if kept:
            lines.append(f"{title}: " + "; ".join(kept))
    if not lines:
        return SMALL_TALK
    topic = data.get("topic")
    if isinstance(topic, str) and topic.strip():
        lines.insert(0, f"Topic: {topic.strip()}")
    return "\n".join(lines)


class LLMSummarizer:
    """Through the same OpenAI-compatible client (and model) as extraction."""

    name = "llm"

    def __init__(self, settings: LLMSettings, *, client: LLMClient | None = None) -> None:
        self.settings = settings
        self._client = client or LLMClient(settings)

    def close(self) -> None:
        self._client.close()

    def summarize(self, request: SummaryRequest) -> SummaryOutput:
        system, user = build_summary_messages(
            level=request.level,
            lines=[(i.label, i.text, i.kind == "summary") for i in request.items],
            max_tokens=request.max_tokens,
            focus=request.focus,
        )
        try:
            reply = self._client.complete_json(
                system=system,
                user=user,
                schema=SUMMARY_SCHEMA,
                schema_name="tier_summary",
                # The JSON keys cost tokens too; a reply cut off here is malformed and the
                # loop falls back, so the cap bounds what one summary can cost.
                max_tokens=2 * request.max_tokens + 64,
            )
        except MalformedOutput as exc:  # the first reply and the repair were both unusable
            return self._failed(exc, calls=2)
        except DomainError as exc:  # timeouts, 429/5xx, refusals: fall back for this step
            return self._failed(exc, calls=1)
        data = reply.data if isinstance(reply.data, dict) else {}
        return SummaryOutput(
            text=render_summary(data),
            summarizer=self.name,
            model=reply.model,
            llm_calls=2 if reply.repaired else 1,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
        )

    def _failed(self, exc: DomainError, *, calls: int) -> SummaryOutput:
        return SummaryOutput(
            text="",
            summarizer=self.name,
            model=self.settings.model,
            llm_calls=calls,
            error=f"{exc.code}: {exc.message}"[:500],
        )
