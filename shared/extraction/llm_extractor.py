"""The LLM extractor: one JSON chat call per turn (or per batch of a session's turns, ADR
0024), then per-item validation."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any, Literal

from shared.config import ExtractionSettings, LLMSettings
from shared.errors import DomainError
from shared.extraction.base import ExtractionResult, KnownFact, TurnInput, validate_items
from shared.extraction.batch import (
    batch_prompt_hash,
    build_batch_messages,
    items_by_turn,
    pack_turns,
    share,
    shown_known_facts,
    with_turn_numbers,
)
from shared.extraction.checks import review
from shared.extraction.endings import link_ending
from shared.extraction.prefilter import is_small_talk
from shared.extraction.prompts import (
    ASK_AGAIN_SHOWN,
    EXTRACTOR_VERSION,
    ask_again_message,
    build_extraction_messages,
    prompt_hash,
)
from shared.extraction.schemas import TypedFact, strict_json_schema
from shared.extraction.value_now import (
    VALUE_NOW_SCHEMA_NAME,
    follow_ups,
    restates,
    touched_facts,
)
from shared.llm.client import LLMClient, LLMReply, MalformedOutput
from shared.llm.prompts import json_mode_instructions
from shared.tokens import count_tokens

logger = logging.getLogger(__name__)

SCHEMA_NAME = "extracted_facts"
VALUE_NOW_MAX_TOKENS = 60  # a value


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
        self._batch_prompt_hash = batch_prompt_hash()

    def extract(self, turn: TurnInput) -> ExtractionResult:
        if self.settings.prefilter and is_small_talk(turn.user_message):
            return self._result([], skipped_reason="small_talk")
        turn = self._trimmed(turn)
        system, user = build_extraction_messages(turn, max_facts=self.settings.max_facts_per_turn)
        reply = self.client.complete_json(
            system=system,
            user=user,
            schema=self._schema,
            schema_name=SCHEMA_NAME,
            decoding_schema=self._decoding_schema,
        )
        result = self._validated(_facts_of(reply), turn, reply)
        result.prompt_tokens = reply.prompt_tokens
        result.completion_tokens = reply.completion_tokens
        if result.all_dropped and self.settings.ask_again_when_dropped:
            reply, result = self._asked_again(turn, reply, result)
        if self.settings.ending_checks_per_turn and not result.all_dropped:
            self._ask_values_now(turn, reply, result)
        return result

    def _ask_values_now(self, turn: TurnInput, reply: LLMReply, result: ExtractionResult) -> None:
        """Asks, in follow-ups of `reply`'s conversation, what the value of each known fact
        the reply touched is now, or how the person feels now about a liking, habit or
        hobby, or whether a fact the person's message names is still true (ADR 0032). A new
        value in the person's own words is added to `result` as a fact tied to the known
        one (the writer retires it), "none", a feeling that says it stopped or "no" as its
        ending, and the turn's items restating it are dropped. At most
        `ending_checks_per_turn` questions; each one's cost is the turn's; one that fails
        changes nothing."""
        items = _facts_of(reply)
        linked = {fact_id for fact in result.facts for fact_id in fact.ends_fact_ids}
        goals, still_true = self.settings.goal_checks, self.settings.still_true_checks
        touched = touched_facts(
            turn, items, likings=self.settings.liking_checks, goals=goals, still_true=still_true
        )
        questions = (
            question
            for known in touched
            if known.id not in linked
            for question in follow_ups(known, turn, goals=goals, still_true=still_true)
        )
        asked, done = 0, set()
        for question in questions:
            if asked >= self.settings.ending_checks_per_turn:
                break
            if question.known.id in done:
                continue  # an earlier question about it changed it
            asked += 1
            answer = self._ask_again(
                reply,
                question.text,
                schema=question.schema,
                schema_name=VALUE_NOW_SCHEMA_NAME,
                decoding_schema=question.schema,
                max_tokens=VALUE_NOW_MAX_TOKENS,
                answer=_shown_answer(items),
            )
            if answer is None:
                continue
            result.ending_checks += 1
            result.prompt_tokens += answer.prompt_tokens
            result.completion_tokens += answer.completion_tokens
            result.llm_ms += answer.latency_ms
            now = answer.data.get("now") if isinstance(answer.data, dict) else None
            changed = question.answer_fact(now, turn) if isinstance(now, str) else None
            if changed is not None:
                known = question.known
                kept = [fact for fact in result.facts if not restates(fact, known)]
                result.facts = [changed, *kept][: self.settings.max_facts_per_turn]
                result.values_changed += 1
                done.add(known.id)

    def _asked_again(
        self, turn: TurnInput, reply: LLMReply, first: ExtractionResult
    ) -> tuple[LLMReply, ExtractionResult]:
        """Every item of `reply` was dropped: the model is told why, in the same
        conversation, and asked again (ADR 0031). The final reply and its result, with
        `first` on it; the turn's cost is both calls'. Should the question itself fail, the
        first result stands (a `dropped` run, retryable)."""
        again = self._ask_again(
            reply,
            ask_again_message({0: first.rejected}, turn.user_speaker),
            schema=self._schema,
            decoding_schema=self._decoding_schema,
            answer=_shown_answer(_facts_of(reply)),
        )
        if again is None:
            return reply, first
        result = self._validated(_facts_of(again), turn, again)
        return again, _after(first, result, again.prompt_tokens, again.completion_tokens)

    def extract_batch(self, turns: Sequence[TurnInput]) -> list[ExtractionResult]:
        """One result per turn, in order (turns of one session, oldest first): small talk
        skipped as alone; the rest in as few calls as fit `batch_max_tokens` with one
        turn's reply room (TIERMEM_LLM__MAX_TOKENS) left, a turn alone in its call
        extracted exactly as `extract` does."""
        results: dict[int, ExtractionResult] = {}
        asked = []
        for i, turn in enumerate(turns):
            if self.settings.prefilter and is_small_talk(turn.user_message):
                results[i] = self._result([], skipped_reason="small_talk")
            else:
                asked.append(i)
        trimmed = [self._trimmed(turn) for turn in turns]
        budget = self.settings.batch_max_tokens - self.llm_settings.max_tokens
        calls = pack_turns(
            asked, lambda call: self._batch_prompt_tokens([trimmed[i] for i in call]), budget=budget
        )
        for call in calls:
            if len(call) == 1:
                results[call[0]] = self.extract(turns[call[0]])
                continue
            together = self._extract_together([trimmed[i] for i in call])
            results.update(zip(call, together, strict=True))
        return [results[i] for i in range(len(turns))]

    def _extract_together(self, turns: list[TurnInput]) -> list[ExtractionResult]:
        n = len(turns)
        # The known facts the call shows, numbered as one list for all its turns.
        shown = self._shown_known_facts(turns)
        system, user = self._batch_messages(turns, shown)
        decoding = self._batch_decoding_schema(n)
        room = self.settings.batch_max_tokens - self._prompt_tokens(system, user, decoding)
        reply = self.client.complete_json(
            system=system,
            user=user,
            schema=with_turn_numbers(self._schema, n),
            schema_name=SCHEMA_NAME,
            decoding_schema=decoding,
            # Each turn's reply may take what one turn's may, within the context's room.
            max_tokens=max(min(self.llm_settings.max_tokens * n, room), 1),
        )
        prompt_shares = share(reply.prompt_tokens, n)
        completion_shares = share(reply.completion_tokens, n)
        grouped = items_by_turn(_facts_of(reply), n)
        shown_turns = [dataclasses.replace(turn, known_facts=shown) for turn in turns]
        results = []
        for i, (turn, items) in enumerate(zip(shown_turns, grouped, strict=True)):
            result = self._validated(items, turn, reply)
            result.prompt_hash = self._batch_prompt_hash
            result.prompt_tokens = prompt_shares[i]
            result.completion_tokens = completion_shares[i]
            result.llm_ms = reply.latency_ms / n  # shares too: the runs add up to the call
            result.batch_size = n
            results.append(result)
        dropped = [i for i, result in enumerate(results) if result.all_dropped]
        if dropped and self.settings.ask_again_when_dropped:
            self._ask_again_together(shown_turns, reply, grouped, results, dropped, decoding)
        return results

    def _ask_again_together(
        self,
        turns: list[TurnInput],
        reply: LLMReply,
        grouped: list[list[Any]],
        results: list[ExtractionResult],
        dropped: list[int],
        decoding: dict[str, Any],
    ) -> None:
        """`_asked_again` for the turns of a batch call (`reply`, its items by turn in
        `grouped`) whose every item was dropped: one follow-up names them all; each takes its
        own items of the answer, and a share of its cost."""
        n = len(turns)
        shown = [{"turn": i + 1, **item} for i in dropped for item in grouped[i][:ASK_AGAIN_SHOWN]]
        again = self._ask_again(
            reply,
            ask_again_message({i + 1: results[i].rejected for i in dropped}, turns[0].user_speaker),
            schema=with_turn_numbers(self._schema, n),
            decoding_schema=decoding,
            max_tokens=self.llm_settings.max_tokens * len(dropped),
            # Only the asked turns' items: the others were kept, and need no room.
            answer=json.dumps({"facts": shown}),
        )
        if again is None:
            return
        answered = items_by_turn(_facts_of(again), n)
        prompt_shares = share(again.prompt_tokens, len(dropped))
        completion_shares = share(again.completion_tokens, len(dropped))
        for k, i in enumerate(dropped):
            first = results[i]
            result = self._validated(answered[i], turns[i], again)
            result.prompt_hash = first.prompt_hash
            result.batch_size = first.batch_size
            result.llm_ms = again.latency_ms / len(dropped)
            results[i] = _after(first, result, prompt_shares[k], completion_shares[k])

    def _ask_again(
        self,
        reply: LLMReply,
        message: str,
        *,
        schema: dict[str, Any],
        decoding_schema: dict[str, Any],
        answer: str | None,
        max_tokens: int | None = None,
        schema_name: str = SCHEMA_NAME,
    ) -> LLMReply | None:
        """The follow-up's reply, or None when it failed: the first result then stands."""
        try:
            return self.client.ask_again(
                reply,
                message,
                schema=schema,
                schema_name=schema_name,
                decoding_schema=decoding_schema,
                max_tokens=max_tokens,
                answer=answer,
            )
        except DomainError as exc:
            logger.warning("asking the model again failed", extra={"error": str(exc)})
            return None

    def _batch_messages(
        self, turns: list[TurnInput], shown: tuple[KnownFact, ...]
    ) -> tuple[str, str]:
        return build_batch_messages(
            turns, max_facts=self.settings.max_facts_per_turn, known_facts=shown
        )

    def _shown_known_facts(self, turns: list[TurnInput]) -> tuple[KnownFact, ...]:
        # Twice one turn's known facts: each turn's nearest ones, without N times the lines.
        return shown_known_facts(turns, max_known=2 * self.settings.context_facts)

    def _batch_decoding_schema(self, turns: int) -> dict[str, Any]:
        """Bounded as one turn's is, by max_facts for each turn of the call (at most
        batch_turns of them), so it grows with the batch and stays bounded."""
        bound = self.settings.max_facts_per_turn * turns
        return with_turn_numbers(strict_json_schema(max_facts=bound), turns)

    def _batch_prompt_tokens(self, turns: list[TurnInput]) -> int:
        system, user = self._batch_messages(turns, self._shown_known_facts(turns))
        return self._prompt_tokens(system, user, self._batch_decoding_schema(len(turns)))

    def _prompt_tokens(self, system: str, user: str, decoding: dict[str, Any]) -> int:
        """About what the server will count (cl100k, not the model's own tokenizer): the
        messages, and the schema when the call will carry it in the prompt."""
        schema = json_mode_instructions(decoding) if self.client.schema_in_prompt() else ""
        return count_tokens(system + schema) + count_tokens(user)

    def _trimmed(self, turn: TurnInput) -> TurnInput:
        limit = self.settings.max_message_chars
        return dataclasses.replace(
            turn,
            user_message=turn.user_message[:limit],
            assistant_message=turn.assistant_message[:limit] if turn.assistant_message else None,
        )

    def _validated(self, items: list[Any], turn: TurnInput, reply: LLMReply) -> ExtractionResult:
        """The turn's items repaired, validated and checked; the result says what the call
        (`reply`) was and what was kept and dropped. Tokens are the caller's to set."""
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
        result.endings_linked = sum(link_ending(fact, turn) for fact in validated.facts)
        result.items_returned = len(items)
        result.dropped_invalid = validated.dropped_invalid
        result.dropped_repeats = validated.dropped_repeats
        result.dropped_low_confidence = validated.dropped_low_confidence
        result.dropped_over_limit = validated.dropped_over_limit
        result.repaired = validated.repaired
        result.rejected = validated.rejected
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


def _shown_answer(items: list[Any]) -> str | None:
    """The model's answer as the follow-up shows it: whole, unless it held more items than
    the question names; then those only (a 1.5B model's ten items with the prompt came near
    a 4,096-token context, and the server refused the follow-up)."""
    if len(items) <= ASK_AGAIN_SHOWN:
        return None
    return json.dumps({"facts": items[:ASK_AGAIN_SHOWN]})


def _after(
    first: ExtractionResult, result: ExtractionResult, prompt_tokens: int, completion_tokens: int
) -> ExtractionResult:
    """`result`, the answer to asking again, carrying `first` and the turn's whole cost:
    both calls' tokens and time."""
    result.first_reply = first
    result.prompt_tokens = first.prompt_tokens + prompt_tokens
    result.completion_tokens = first.completion_tokens + completion_tokens
    result.llm_ms += first.llm_ms
    return result


def _facts_of(reply: LLMReply) -> list[Any]:
    items = reply.data.get("facts") if isinstance(reply.data, dict) else None
    if not isinstance(items, list):  # LLMClient checks the top level; this is for mypy
        raise MalformedOutput("LLM reply has no 'facts' list")
    return items
