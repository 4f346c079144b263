"""Memory-augmented chat: POST /v1/chat, and POST /v1/chat/completions for OpenAI SDKs."""

from __future__ import annotations

import time
from collections.abc import Generator
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Header, Response
from fastapi.responses import JSONResponse

from services.api.deps import RuntimeDep, TasksDep, TenantDep
from services.api.errors import UPSTREAM_RESPONSES, error_body
from services.api.routing import ApiRoute
from services.api.sse import event, sse_response
from shared.chat.models import ChatIn, ChatPublic
from shared.chat.openai_api import (
    CompletionRequest,
    completion_chunk,
    completion_object,
    completion_turn,
    new_completion_id,
)
from shared.flows.chat_turn import ChatTurnStream, run_chat_turn, start_chat_stream
from shared.inputs import ID_RULE, MAX_BUDGET_TOKENS, Identifier

router = APIRouter(prefix="/v1", tags=["chat"], responses=UPSTREAM_RESPONSES, route_class=ApiRoute)
SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "JSON, or events when streaming"}
}


@router.post("/chat", response_model=ChatPublic, responses=SSE_DOC)
def post_chat(
    body: ChatIn, tasks: TasksDep, runtime: RuntimeDep, tenant_id: TenantDep
) -> ChatPublic | Response:
    """One turn: context, chat model, reply; the turn is stored and queued for extraction."""
    turn, send = body.to_turn(), tasks.extract
    if not body.stream:
        return run_chat_turn(runtime=runtime, tenant_id=tenant_id, turn=turn, enqueue=send)
    stream = start_chat_stream(runtime=runtime, tenant_id=tenant_id, turn=turn, enqueue=send)
    return sse_response(_chat_events(stream))


@router.post("/chat/completions", responses=SSE_DOC)
def chat_completions(
    body: CompletionRequest,
    tasks: TasksDep,
    runtime: RuntimeDep,
    tenant_id: TenantDep,
    # Not in the schema: JSON Schema cannot say "the body's user, or this header"; the
    # schema asks for `user`, and the header is the README's alternative.
    x_tiermem_user: Annotated[str | None, Header(include_in_schema=False)] = None,
    x_tiermem_session: Annotated[
        Identifier | None, Header(description=f"the session (default <user>-default); {ID_RULE}")
    ] = None,
    x_tiermem_budget_tokens: Annotated[
        int | None, Header(ge=0, le=MAX_BUDGET_TOKENS, description="the context budget")
    ] = None,
) -> Response:
    """The OpenAI Chat Completions API with the user's memory added (README: OpenAI SDKs)."""
    turn = completion_turn(
        body, user=x_tiermem_user, session=x_tiermem_session, budget=x_tiermem_budget_tokens
    )
    cid, send = new_completion_id(), tasks.extract
    if not body.stream:
        result = run_chat_turn(runtime=runtime, tenant_id=tenant_id, turn=turn, enqueue=send)
        headers = _ids(result.session_id, result.message_ids[0], result.job_id)
        return JSONResponse(completion_object(result, completion_id=cid), headers=headers)
    stream = start_chat_stream(runtime=runtime, tenant_id=tenant_id, turn=turn, enqueue=send)
    headers = _ids(turn.session_external_id, stream.user_message_id, stream.job_id)
    return sse_response(_completion_events(stream, cid, body.include_usage), headers)


def _ids(session_id: str, message_id: str, job_id: str | None) -> dict[str, str]:
    """What an OpenAI-shaped answer has no field for: the stored turn's ids."""
    ids = {"X-Tiermem-Session": session_id, "X-Tiermem-Message-Id": message_id}
    return {**ids, "X-Tiermem-Job-Id": job_id} if job_id else ids


def _chat_events(stream: ChatTurnStream) -> Generator[str, None, None]:
    for delta in stream:
        yield event({"delta": delta})
    if stream.error is not None:
        yield event(error_body(stream.error.code, stream.error.message, stream.error.details))
    elif stream.result is not None:
        yield event({"done": True, **stream.result.model_dump(exclude={"reply"})})


def _completion_events(
    stream: ChatTurnStream, cid: str, include_usage: bool
) -> Generator[str, None, None]:
    chunk = partial(completion_chunk, completion_id=cid, created=int(time.time()))
    yield event(chunk(model=stream.model, delta={"role": "assistant", "content": ""}))
    for delta in stream:
        yield event(chunk(model=stream.model, delta={"content": delta}))
    if stream.error is not None:
        # The shape OpenAI sends mid-stream; the openai SDK raises APIError on it.
        error = stream.error
        yield event({"error": {"message": error.message, "type": error.code, "code": error.code,
                               "details": error.details}})  # fmt: skip
        return
    result = stream.result
    if result is not None:
        yield event(chunk(model=result.model, finish_reason=result.finish_reason or "stop"))
        if include_usage:
            yield event(chunk(model=result.model, usage=result.usage.model_dump()))
    yield event("[DONE]")
