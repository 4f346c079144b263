"""The chat model that answers users: an OpenAI-compatible client whose failures become 502/504."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from shared.config import Settings
from shared.errors import UpstreamError, UpstreamTimeout
from shared.llm.endpoint import Endpoint, read_failure
from shared.tokens import count_tokens

logger = logging.getLogger(__name__)

Messages = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class ChatReply:
    content: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None

    @property
    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


class ChatModel:
    """One per process (the httpx pool inside is thread-safe).

    The openai client does not retry (Endpoint.client): a person is waiting, and the API
    answers 502/504 at once with the stored message's id, so the caller decides whether
    to retry.
    """

    def __init__(self, settings: Settings) -> None:
        self.endpoint = Endpoint.chat(settings)
        self.base_url = self.endpoint.base_url
        self.model = settings.chat.model
        self.timeout_s = settings.chat.timeout_s
        self.max_tokens = settings.chat.max_tokens
        self._client = self.endpoint.client()

    def close(self) -> None:
        self._client.close()

    def complete(
        self,
        messages: Messages,
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> ChatReply:
        """One reply. `options` are further Chat Completions parameters passed through as is."""
        request = self._request(messages, model, temperature, max_tokens, options)
        try:
            completion: ChatCompletion = self._client.chat.completions.create(**request)
        except openai.APIError as exc:
            raise self._map_error(exc, request["model"]) from exc
        except ValueError as exc:  # a 200 whose body is not JSON (openai lets it out)
            raise self._not_an_api(exc, request["model"]) from exc
        # openai builds the reply without validating it: a JSON body of the wrong shape
        # shows up as missing or mistyped attributes.
        try:
            choice = completion.choices[0]
            content = choice.message.content or ""
            finish_reason = choice.finish_reason
            usage = completion.usage
        except (AttributeError, IndexError, TypeError) as exc:
            raise self._not_an_api(f"unexpected reply shape: {exc}", request["model"]) from exc
        prompt_tokens, completion_tokens = _usage(usage, messages, content)
        return ChatReply(
            content=content,
            model=getattr(completion, "model", None) or request["model"],
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=finish_reason,
        )

    def stream(
        self,
        messages: Messages,
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> ChatStream:
        """Open a streamed reply. Connecting happens here, so a refusal, a timeout before the
        first byte or an HTTP error raises now, while the caller can still answer 502/504."""
        request = self._request(messages, model, temperature, max_tokens, options)
        try:
            raw = self._client.chat.completions.create(
                **request, stream=True, stream_options={"include_usage": True}
            )
        except openai.APIError as exc:
            raise self._map_error(exc, request["model"]) from exc
        return ChatStream(self, raw, model=request["model"], messages=messages)

    def _request(
        self,
        messages: Messages,
        model: str | None,
        temperature: float | None,
        max_tokens: int | None,
        options: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": model or self.model, "messages": list(messages)}
        if temperature is not None:
            request["temperature"] = temperature
        limit = max_tokens if max_tokens is not None else self.max_tokens
        if limit is not None:
            request["max_tokens"] = limit
        request.update(options or {})
        return request

    def _map_error(self, exc: Exception, model: str) -> UpstreamError:
        where = self.base_url
        details: dict[str, Any] = {"base_url": where, "model": model}
        failure = read_failure(exc)
        if failure.kind == "timeout":
            details["timeout_s"] = self.timeout_s
            error: UpstreamError = UpstreamTimeout(
                f"the chat model ({model}) did not answer within {self.timeout_s:g}s at "
                f"{where}; try again, or raise TIERMEM_CHAT__TIMEOUT_S",
                details=details,
            )
        elif failure.kind == "unreachable":
            error = UpstreamError(
                f"could not reach the chat model at {where}: {failure.said}; check that the "
                "server is up and TIERMEM_CHAT__BASE_URL",
                details=details,
            )
        elif failure.kind == "status":
            details["upstream_status"] = failure.status
            error = UpstreamError(
                f"{self._advice(failure.status, model)} (it said: {failure.said})",
                details=details,
            )
        elif failure.kind == "broke_off":  # the server failed after it started answering
            error = UpstreamError(
                f"the chat model at {where} failed while answering: {failure.said}",
                details=details,
            )
        else:
            error = self._not_an_api(exc, model)
        logger.warning(
            "chat model call failed",
            extra={
                "code": error.code,
                "model": model,
                "upstream_status": details.get("upstream_status"),
            },
        )
        return error

    def _advice(self, status: int, model: str) -> str:
        where = self.base_url
        if status == 429:
            return f"the chat model is rate-limited (429) at {where}; try again shortly"
        if status >= 500:
            return f"the chat model's server failed ({status}) at {where}; try again"
        if status == 404:
            return (
                f"chat endpoint or model {model!r} not found (404) at {where}: check "
                "TIERMEM_CHAT__BASE_URL (usually ends in /v1) and the model name"
            )
        if status in (400, 413, 422):
            return (
                f"the chat model rejected the request ({status}) at {where} (too long for its "
                "context window, or a parameter it does not support)"
            )
        return self.endpoint.advice(status, model)

    def _not_an_api(self, problem: object, model: str) -> UpstreamError:
        return UpstreamError(
            self.endpoint.not_an_api(problem),
            details={"base_url": self.base_url, "model": model},
        )


class StoredReplyStream:
    """A reply stored before, as a stream of one delta: the answer to a resent message."""

    def __init__(self, reply: ChatReply) -> None:
        self._reply = reply
        self.model = reply.model

    def __iter__(self) -> Iterator[str]:
        yield self._reply.content

    def close(self) -> None:
        pass

    def reply(self) -> ChatReply:
        return self._reply


class ChatStream:
    """One streamed reply: iterate for the text deltas; `reply()` afterwards has the text
    handed out, the usage and the finish reason. Closing it closes the upstream response.

    The first delta is read when the stream is opened, so a server that accepts the
    request and then fails, sends an error event or nothing usable, fails `stream()`.
    """

    def __init__(
        self,
        owner: ChatModel,
        raw: openai.Stream[ChatCompletionChunk],
        *,
        model: str,
        messages: Messages,
    ) -> None:
        self._owner = owner
        self._raw = raw
        self._messages = messages
        self._parts: list[str] = []
        self._usage: Any = None
        self._events = 0
        self.model = model
        self.finish_reason: str | None = None
        self._deltas = self._read()
        try:
            self._first = next(self._deltas, None)
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[str]:
        try:
            if self._first is not None:
                self._parts.append(self._first)
                yield self._first
            for text in self._deltas:
                self._parts.append(text)
                yield text
        finally:
            self.close()

    def _read(self) -> Iterator[str]:
        try:
            for chunk in self._raw:
                self._events += 1
                self.model = getattr(chunk, "model", None) or self.model
                if getattr(chunk, "usage", None):
                    self._usage = chunk.usage
                for choice in getattr(chunk, "choices", None) or []:
                    if choice.index != 0:
                        continue
                    if choice.finish_reason:
                        self.finish_reason = choice.finish_reason
                    text = choice.delta.content if choice.delta else None
                    if text:
                        yield text
        # Errors after the headers are not wrapped by openai: httpx's read timeout, a
        # dropped connection, or an error event the server sent mid-stream.
        except (openai.APIError, httpx.HTTPError) as exc:
            raise self._owner._map_error(exc, self.model) from exc
        except (ValueError, AttributeError) as exc:
            raise self._owner._not_an_api(exc, self.model) from exc
        if not self._events:  # e.g. a web page answered 200 where the API should be
            raise self._owner._not_an_api("the stream ended without any event", self.model)

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def close(self) -> None:
        self._raw.close()

    def reply(self) -> ChatReply:
        content = self.text
        prompt_tokens, completion_tokens = _usage(self._usage, self._messages, content)
        return ChatReply(
            content=content,
            model=self.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=self.finish_reason,
        )


def _usage(usage: Any, messages: Messages, content: str) -> tuple[int, int]:
    if usage is not None:
        try:
            return int(usage.prompt_tokens), int(usage.completion_tokens)
        except (AttributeError, TypeError, ValueError):
            pass
    # Some servers report no usage (or none when streaming): count with tiktoken rather
    # than answer zeros, so the numbers stay useful for budgeting.
    prompt = sum(count_tokens(str(m.get("content") or "")) + 4 for m in messages)
    return prompt, count_tokens(content)
