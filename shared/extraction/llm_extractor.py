"""The LLM extractor: one JSON chat call per turn, then per-item validation."""

from __future__ import annotations

import dataclasses
import logging
from typing import Literal

from shared.config import ExtractionSettings, LLMSettings
from shared.extraction.base import ExtractionResult, TurnInput, validate_items
from shared.extraction.checks import review
from shared.extraction.prefilter import is_small_talk
from shared.extraction.prompts import EXTRACTOR_VERSION, build_extraction_messages, prompt_hash
from shared.extraction.schemas import TypedFact, strict_json_schema
from shared.llm.client import LLMClient, MalformedOutput

logger = logging.getLogger(__name__)

SCHEMA_NAME = "extracted_facts"


class LLMExtractor:
    """Implements `Extractor` with an OpenAI-compatible model.

    Malformed replies (not JSON, or JSON without a "facts" list) get one repair call inside
    LLMClient, then fail with MalformedOutput, a PermanentError: retrying the same prompt
    with temperature 0 would most likely fail the same way. Items inside "facts" are
    repaired where their meaning is whole (a field left out takes its default; the subject
    is always the person the request names) and validated one by one; an item whose
    meaning is missing is dropped and counted with its reason.
    """

    kind: Literal["llm", "offline"] = "llm"
    version: str = EXTRACTOR_VERSION

    def __init__(
        self,
        llm: LLMSettings,
        extraction: ExtractionSettings,
        *,
        client: LLMClient | None = None,
    ) -> None:
        self.llm_settings = llm
        self.settings = extraction
        # A shared client may be passed in so one process keeps one connection pool.
        self.client = client or LLMClient(llm)
        self._schema = strict_json_schema()
        # What llama.cpp-family servers decode by: bounded, so a small model that repeats
        # itself stops at max_facts instead of filling its context.
        self._decoding_schema = strict_json_schema(max_facts=extraction.max_facts_per_turn)
        self._prompt_hash = prompt_hash()

    def extract(self, turn: TurnInput) -> ExtractionResult:
        if self.settings.prefilter and is_small_talk(turn.user_message):
            return self._result([], skipped_reason="small_talk")
        limit = self.settings.max_message_chars
        turn = dataclasses.replace(
            turn,
            user_message=turn.user_message[:limit],
            assistant_message=turn.assistant_message[:limit] if turn.assistant_message else None,
        )
        system, user = build_extraction_messages(turn, max_facts=self.settings.max_facts_per_turn)
        reply = self.client.complete_json(
            system=system,
            user=user,
            schema=self._schema,
            schema_name=SCHEMA_NAME,
            decoding_schema=self._decoding_schema,
        )
        items = reply.data.get("facts") if isinstance(reply.data, dict) else None
        if not isinstance(items, list):  # LLMClient checks the top level; this is for mypy
            raise MalformedOutput("LLM reply has no 'facts' list")
        validated = validate_items(
            items,
            max_facts=self.settings.max_facts_per_turn,
            min_confidence=self.settings.min_confidence,
            subject=turn.user_speaker,
            review=review(turn),
        )
        if validated.dropped_invalid:
            logger.info(
                "dropped invalid facts",
                extra={"dropped": validated.dropped_invalid, "reasons": validated.reasons[:5]},
            )
        result = self._result(validated.facts, model=reply.model)
        result.items_returned = len(items)
        result.dropped_invalid = validated.dropped_invalid
        result.dropped_low_confidence = validated.dropped_low_confidence
        result.dropped_over_limit = validated.dropped_over_limit
        result.repaired = validated.repaired
        result.invalid_reasons = validated.reasons
        result.prompt_tokens = reply.prompt_tokens
        result.completion_tokens = reply.completion_tokens
        result.llm_ms = reply.latency_ms
        result.response_format = reply.response_format
        result.response_format_note = reply.response_format_note
        return result

    def _result(
        self,
        facts: list[TypedFact],
        *,
        model: str | None = None,
        skipped_reason: str | None = None,
    ) -> ExtractionResult:
        return ExtractionResult(
            facts=facts,
            extractor="llm",
            extractor_version=self.version,
            model=model or self.llm_settings.model,
            prompt_hash=self._prompt_hash,
            skipped_reason=skipped_reason,
        )
