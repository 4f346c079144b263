"""The OpenAI-compatible chat client: JSON replies, one repair call, errors mapped for retrying."""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from shared.config import LLMSettings
from shared.errors import PermanentError, TransientError
from shared.llm.endpoint import Endpoint, read_failure, upstream_error_text
from shared.llm.formats import (
    FALLBACKS,
    FORMAT_RANK,
    JSON_OBJECT,
    JSON_OBJECT_SCHEMA,
    JSON_SCHEMA,
    NEXT_FORMAT,
    NOTE_CHARS,
    REASON_CHARS,
    CallFormat,
    StructuredOutputFallbacks,
    rejects_structured_output,
)
from shared.llm.parsing import parse_reply
from shared.llm.prompts import json_mode_instructions, repair_instructions

logger = logging.getLogger(__name__)

# Statuses the openai client itself would retry: 408 request timeout, 409 lock conflict,
# 429 and 5xx. Our Celery task does the retrying, so these become TransientError.
_TRANSIENT_STATUSES = {408, 409, 429}


# A request longer than the model's context window (OpenAI, vLLM and llama.cpp's words).
_CONTEXT_FULL = re.compile(r"context length|context window|maximum context|too many tokens", re.I)


class _StructuredOutputRejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MalformedOutput(PermanentError):
    """The model's reply was not the JSON asked for, even after one repair attempt."""

    code = "llm_malformed_output"


@dataclass(frozen=True)
class LLMReply:
    data: Any  # the parsed JSON
    raw: str  # the text the parsed JSON came from (the repaired text after a repair)
    model: str
    # Summed over both calls when a repair was needed: they are what the turn cost.
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    repaired: bool = False
    response_format: str = JSON_SCHEMA
    # Set when json_object was used because the server rejected json_schema (now or before).
    response_format_note: str | None = None
    # The messages this reply answers (the repair conversation after a repair): what
    # `ask_again` continues, so the follow-up shares the earlier request's prefix.
    messages: tuple[ChatCompletionMessageParam, ...] = ()


@dataclass(frozen=True)
class _Call:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None


class LLMClient:
    """One per process: the underlying httpx pool is thread-safe and shared by all calls.

    Its failures are TransientError (worth the Celery task's retry with backoff) or
    PermanentError; the openai client itself does not retry (Endpoint.client).
    """

    def __init__(
        self, settings: LLMSettings, *, fallbacks: StructuredOutputFallbacks | None = None
    ) -> None:
        self.endpoint = Endpoint.llm(settings)
        self.settings = settings
        self.base_url = self.endpoint.base_url
        self.fallbacks = FALLBACKS if fallbacks is None else fallbacks
        self._client = self.endpoint.client()

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete_json(
        self,
        *,
        system: str,
        user: str,
        schema: dict[str, Any],
        schema_name: str,
        max_tokens: int | None = None,
        decoding_schema: dict[str, Any] | None = None,
    ) -> LLMReply:
        """Ask for a JSON reply matching `schema`; repair malformed output once.

        `max_tokens` caps this call's reply (default TIERMEM_LLM__MAX_TOKENS).
        `decoding_schema` (default `schema`) is what a server that decodes by a schema given
        inside json_object gets, bounds included; `schema` follows OpenAI's strict rules.

        Raises TransientError (worth retrying), PermanentError, or MalformedOutput when the
        reply is still not usable JSON after the repair call.
        """
        fmt = self._format()
        started = time.perf_counter()
        bounded = decoding_schema or schema
        messages = _messages(system, user, bounded, fmt)
        first: _Call | None = None
        stepped_down = False
        while first is None:
            try:
                first = self._call(messages, fmt, schema, schema_name, max_tokens, bounded)
            except _StructuredOutputRejected as rejected:
                stepped_down = True
                # At once, one step down the ladder: the schema inside json_object (which
                # llama.cpp's servers decode by), then JSON mode with the schema in the prompt.
                step = NEXT_FORMAT[fmt.type]
                note = f"fell back to {step}: {rejected.reason}"
                fmt = CallFormat(step, note[:NOTE_CHARS])
                messages = _messages(system, user, bounded, fmt)
        if stepped_down:  # this call learnt it: remembered once, said once
            self.fallbacks.remember(self.base_url, self.settings.model, fmt.type, fmt.note or "")
            logger.warning(
                "llm server rejects %s; using %s for this model from now on",
                self.settings.response_format,
                fmt.type,
                extra={"model": self.settings.model, "base_url": self.base_url},
            )
        return self._reply(
            messages, first, fmt, schema, schema_name, max_tokens, bounded, started=started
        )

    def ask_again(
        self,
        reply: LLMReply,
        message: str,
        *,
        schema: dict[str, Any],
        schema_name: str,
        max_tokens: int | None = None,
        decoding_schema: dict[str, Any] | None = None,
        answer: str | None = None,
    ) -> LLMReply:
        """A follow-up in the conversation `reply` ended: its messages, its answer (or
        `answer`, a shorter text in its place: a long reply need not fill a small context
        again), then `message`, in the format that answer came in. The earlier request is
        the prefix, so a server that reuses the longest matching prefix (llama.cpp's) reads
        only the new part: a few seconds on a CPU where a separate prompt costs its whole
        length. Errors as `complete_json`'s."""
        fmt = CallFormat(reply.response_format, reply.response_format_note)
        started = time.perf_counter()
        bounded = decoding_schema or schema
        messages: list[ChatCompletionMessageParam] = [
            *reply.messages,
            {"role": "assistant", "content": reply.raw if answer is None else answer},
            {"role": "user", "content": message},
        ]
        try:
            first = self._call(messages, fmt, schema, schema_name, max_tokens, bounded)
        except _StructuredOutputRejected as rejected:  # it took this format a moment ago
            raise TransientError(f"LLM at {self.base_url}: {rejected.reason}") from rejected
        return self._reply(
            messages, first, fmt, schema, schema_name, max_tokens, bounded, started=started
        )

    def _reply(
        self,
        messages: list[ChatCompletionMessageParam],
        first: _Call,
        fmt: CallFormat,
        schema: dict[str, Any],
        schema_name: str,
        max_tokens: int | None,
        bounded: dict[str, Any],
        *,
        started: float,
    ) -> LLMReply:
        """The parsed reply to `messages` (answered by `first`), repaired once if need be."""
        data, problem = parse_reply(first.text, schema)
        calls = [first]
        if problem is not None:
            logger.warning(
                "llm reply unusable, asking once for a repair",
                extra={"problem": problem, "model": first.model, "finish": first.finish_reason},
            )
            repair: list[ChatCompletionMessageParam] = [
                *messages,
                {"role": "assistant", "content": first.text},
                {"role": "user", "content": repair_instructions(problem)},
            ]
            second = self._call(repair, fmt, schema, schema_name, max_tokens, bounded)
            calls.append(second)
            messages = repair
            data, problem = parse_reply(second.text, schema)
            if problem is not None:
                hint = ""
                if second.finish_reason == "length":
                    hint = " (the reply hit max_tokens: raise TIERMEM_LLM__MAX_TOKENS)"
                raise MalformedOutput(
                    f"LLM reply is not the JSON asked for after one repair attempt: "
                    f"{problem}{hint}; output starts {second.text[:200]!r}",
                    details={
                        "model": second.model,
                        "output_head": second.text[:200],
                        **fmt.details(),
                    },
                )
        latency_ms = (time.perf_counter() - started) * 1000
        reply = LLMReply(
            data=data,
            raw=calls[-1].text,
            model=calls[-1].model,
            prompt_tokens=sum(c.prompt_tokens for c in calls),
            completion_tokens=sum(c.completion_tokens for c in calls),
            latency_ms=latency_ms,
            repaired=len(calls) > 1,
            response_format=fmt.type,
            response_format_note=fmt.note,
            messages=tuple(messages),
        )
        logger.info(
            "llm json call done",
            extra={
                "model": reply.model,
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "latency_ms": round(latency_ms, 1),
                "repaired": reply.repaired,
                "response_format": reply.response_format,
            },
        )
        return reply

    def schema_in_prompt(self) -> bool:
        """True when the next call carries the schema in its prompt (any format but
        json_schema), so it counts toward the prompt's tokens."""
        return self._format().type != JSON_SCHEMA

    def _format(self) -> CallFormat:
        """The configured format, unless this server already rejected it."""
        configured = self.settings.response_format
        if self.settings.fallback_to_json_object:
            learned = self.fallbacks.learned(self.base_url, self.settings.model)
            if learned is not None and FORMAT_RANK[learned.type] > FORMAT_RANK[configured]:
                note = f"{learned.type} since an earlier call: {learned.reason}"
                return CallFormat(learned.type, note[:NOTE_CHARS])
        return CallFormat(configured)

    def _call(
        self,
        messages: list[ChatCompletionMessageParam],
        fmt: CallFormat,
        schema: dict[str, Any],
        schema_name: str,
        max_tokens: int | None = None,
        decoding_schema: dict[str, Any] | None = None,
    ) -> _Call:
        if fmt.type == JSON_OBJECT:
            response_format: Any = {"type": JSON_OBJECT}
        elif fmt.type == JSON_OBJECT_SCHEMA:
            response_format = {"type": JSON_OBJECT, "schema": decoding_schema or schema}
        else:
            response_format = {
                "type": JSON_SCHEMA,
                "json_schema": {"name": schema_name, "schema": schema, "strict": True},
            }
        try:
            completion: ChatCompletion = self._client.chat.completions.create(
                model=self.settings.model,
                messages=messages,
                response_format=response_format,
                temperature=self.settings.temperature,
                max_tokens=max_tokens or self.settings.max_tokens,
            )
        except openai.APIStatusError as exc:
            rejected = self._format_rejection(exc, fmt)
            if rejected is not None:
                raise rejected from exc
            raise self._map_error(exc, fmt) from exc
        except openai.APIError as exc:
            raise self._map_error(exc, fmt) from exc
        except ValueError as exc:  # a 200 whose body is not JSON at all (openai lets it out)
            raise self._not_an_api(exc, fmt) from exc
        # openai builds the model without validating it, so a JSON body of the wrong
        # shape shows up here as a missing or mistyped attribute.
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise self._not_an_api("no choices in the reply", fmt)
        try:
            choice = choices[0]
            text = choice.message.content or ""
            refusal = getattr(choice.message, "refusal", None)
            finish_reason = choice.finish_reason
            usage = getattr(completion, "usage", None)
            prompt_tokens = int(usage.prompt_tokens) if usage else 0
            completion_tokens = int(usage.completion_tokens) if usage else 0
        except (AttributeError, TypeError, ValueError) as exc:
            raise self._not_an_api(f"unexpected reply shape: {exc}", fmt) from exc
        if refusal:
            raise PermanentError(
                f"LLM refused the request: {str(refusal)[:200]}",
                details={"model": completion.model, **fmt.details()},
            )
        return _Call(
            text=text,
            model=getattr(completion, "model", None) or self.settings.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=finish_reason,
        )

    def _format_rejection(
        self, exc: openai.APIStatusError, fmt: CallFormat
    ) -> _StructuredOutputRejected | PermanentError | None:
        """None unless the error says the server cannot do the format asked for; then try
        json_object (after json_schema, when allowed) or fail for good: retrying the same
        request would be refused the same way."""
        said = upstream_error_text(exc)
        if not rejects_structured_output(exc.status_code, f"{said} {_body_text(exc)}"):
            return None
        status = exc.status_code
        if fmt.type in NEXT_FORMAT and self.settings.fallback_to_json_object:
            reason = f"the server rejected {fmt.type} (HTTP {status}: {said})"
            return _StructuredOutputRejected(reason[:REASON_CHARS])
        if fmt.type != JSON_OBJECT:
            advice = (
                "set TIERMEM_LLM__RESPONSE_FORMAT=json_object "
                "(or TIERMEM_LLM__FALLBACK_TO_JSON_OBJECT=true)"
            )
        elif fmt.note is not None:
            advice = "it rejected json_schema too: use another server or the offline extractor"
        else:
            advice = "set TIERMEM_LLM__RESPONSE_FORMAT=json_schema if it supports that"
        return PermanentError(
            f"LLM at {self.base_url} rejects response_format {fmt.type} for model "
            f"{self.settings.model!r} (HTTP {status}: {said}): {advice}",
            details={
                "base_url": self.base_url,
                "model": self.settings.model,
                "status": status,
                **fmt.details(),
            },
        )

    def _map_error(self, exc: openai.APIError, fmt: CallFormat) -> TransientError | PermanentError:
        where = self.base_url
        details: dict[str, Any] = {
            "base_url": where,
            "model": self.settings.model,
            **fmt.details(),
        }
        failure = read_failure(exc)
        if failure.kind == "timeout":
            return TransientError(
                f"LLM timed out after {self.settings.timeout_s:g}s at {where}",
                details=details,
            )
        if failure.kind == "unreachable":
            return TransientError(
                f"LLM connection failed at {where}: {failure.said}", details=details
            )
        if failure.kind == "status":
            status, said = failure.status, failure.said
            details["status"] = status
            if status == 429:
                return TransientError(f"LLM rate-limited (429) at {where}: {said}", details=details)
            if status >= 500:
                return TransientError(
                    f"LLM server error ({status}) at {where}: {said}", details=details
                )
            if status in _TRANSIENT_STATUSES:
                return TransientError(f"LLM busy ({status}) at {where}: {said}", details=details)
            return PermanentError(f"{self._advice(status, said)} ({said})", details=details)
        # APIResponseValidationError and friends: a 2xx that is not a chat completion.
        return self._not_an_api(exc, fmt)

    def _advice(self, status: int, said: str = "") -> str:
        where, model = self.base_url, self.settings.model
        if status in (400, 413) and _CONTEXT_FULL.search(said):
            return (
                f"the request does not fit model {model!r}'s context at {where}: lower "
                "TIERMEM_LLM__MAX_TOKENS (the reply's room is counted too) or "
                "TIERMEM_EXTRACTION__CONTEXT_TOKENS, or serve the model with a larger context"
            )
        if status == 404:
            return (
                f"LLM endpoint or model not found (404) at {where}: check TIERMEM_LLM__BASE_URL "
                f"(usually ends in /v1) and TIERMEM_LLM__MODEL ({model!r})"
            )
        if status in (400, 422):
            hint = (
                "; if the server does not support JSON-schema output, set "
                "TIERMEM_LLM__RESPONSE_FORMAT=json_object"
                if self.settings.response_format == JSON_SCHEMA
                else ""
            )
            return f"LLM rejected the request ({status}) at {where}{hint}"
        return self.endpoint.advice(status, model)

    def _not_an_api(self, problem: object, fmt: CallFormat) -> TransientError:
        # Retried like a 502: a proxy's error page is often passing. A base_url that points at
        # a web page answers the same every time, and the run fails with this advice once
        # its retries are spent.
        return TransientError(
            self.endpoint.not_an_api(problem),
            details={"base_url": self.base_url, "model": self.settings.model, **fmt.details()},
        )


def _messages(
    system: str, user: str, schema: dict[str, Any], fmt: CallFormat
) -> list[ChatCompletionMessageParam]:
    # JSON mode does not send the schema, so the prompt carries it; so it does beside a
    # json_object schema, which a server may take without decoding by it.
    if fmt.type != JSON_SCHEMA:
        system = system + json_mode_instructions(schema)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _body_text(exc: openai.APIStatusError) -> str:
    """The whole error body as text: a server may name the format outside "message"."""
    body = exc.body
    if isinstance(body, dict | list):
        return json.dumps(body)[:2000]
    return str(body)[:2000] if body is not None else ""
