"""OpenAI Chat Completions shapes for POST /v1/chat/completions, mapped to and from a chat turn."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.chat.models import ChatPublic, ChatTurnIn
from shared.errors import InvalidInput
from shared.inputs import MAX_COMPLETION_TOKENS, Identifier, RequestModel, check_identifier
from shared.records.ingest import NewMessage

# Sampling parameters forwarded to the chat model as the client sent them. Others are
# ignored, as OpenAI-compatible servers do; the ones whose answer tiermem could not pass
# back (tool calls, several choices) are refused instead of silently dropped.
PASS_THROUGH = (
    "top_p", "max_completion_tokens", "stop", "seed", "presence_penalty", "frequency_penalty",
    "logit_bias", "response_format", "reasoning_effort",
)  # fmt: skip
REFUSED = ("tools", "functions", "tool_choice", "function_call")


class CompletionMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id, …: forwarded as given

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


def _user_required(schema: dict[str, Any]) -> None:
    # The schema asks for `user`: the X-Tiermem-User header, its alternative, is not a field.
    schema.setdefault("required", []).append("user")


class CompletionRequest(RequestModel):
    """A Chat Completions request; `user` (or X-Tiermem-User) names the memory owner."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_user_required)

    model: str = Field(min_length=1, max_length=200)
    messages: list[CompletionMessage] = Field(min_length=1)
    user: Identifier | None = Field(
        default=None, description="the memory owner (or the X-Tiermem-User header instead)"
    )
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_COMPLETION_TOKENS)
    n: int | None = None

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


def completion_turn(
    request: CompletionRequest,
    *,
    user: str | None,
    session: str | None,
    budget: int | None = None,
) -> ChatTurnIn:
    """The memory owner, the session and the new user message (the last one) of a request;
    `user`, `session` and `budget` come from the X-Tiermem-* headers."""
    header_user, header_session = user, session
    if header_user and request.user and header_user != request.user:
        raise InvalidInput(
            f"the request's user field ({request.user!r}) and the X-Tiermem-User header "
            f"({header_user!r}) name different memory owners; send one of them"
        )
    owner = header_user or request.user
    if not owner:
        raise InvalidInput(
            "name the memory owner: set the request's `user` field (user=... in the OpenAI "
            "SDK) or the X-Tiermem-User header"
        )
    # Without X-Tiermem-Session every call of a user lands in one session of theirs.
    session_external_id = header_session or f"{owner}-default"
    _identifier(owner, "user (the `user` field or X-Tiermem-User)")
    _identifier(session_external_id, "session (X-Tiermem-Session)")
    extra = request.model_extra or {}
    refused = [name for name in REFUSED if extra.get(name)]
    if refused:
        raise InvalidInput(
            f"{', '.join(refused)}: tool calling is not supported through tiermem's "
            "/v1/chat/completions; call the model directly for tool turns"
        )
    if request.n not in (None, 1):
        raise InvalidInput("n: tiermem answers one choice per request; send n=1 or leave it out")
    last = next((m for m in reversed(request.messages) if m.role == "user"), None)
    if last is None:
        raise InvalidInput(
            "messages has no user message; the last user message is the turn tiermem stores"
        )
    return ChatTurnIn(
        user_external_id=owner,
        session_external_id=session_external_id,
        message=NewMessage(role="user", content=_text(last.content), speaker=last.name),
        model=request.model,
        temperature=request.temperature,
        max_tokens=request.max_tokens,
        budget_tokens=budget,
        client_messages=[m.model_dump(exclude_unset=True) for m in request.messages],
        options={k: extra[k] for k in PASS_THROUGH if extra.get(k) is not None},
    )


def _identifier(value: str, what: str) -> None:
    try:
        check_identifier(value)
    except ValueError as exc:
        raise InvalidInput(f"{what}: {exc}") from exc


def _text(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, list):  # content parts: the text parts are what is remembered
        return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return content or ""


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def completion_object(result: ChatPublic, *, completion_id: str) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": result.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.reply, "refusal": None},
                "logprobs": None,
                "finish_reason": result.finish_reason or "stop",
            }
        ],
        "usage": result.usage.model_dump(),
        "system_fingerprint": None,
    }


def completion_chunk(
    *,
    completion_id: str,
    created: int,
    model: str,
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One `chat.completion.chunk`; with `usage`, the final usage chunk (no choices)."""
    chunk: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [],
    }
    if usage is not None:
        chunk["usage"] = usage
    else:
        chunk["choices"] = [
            {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}
        ]
    return chunk
