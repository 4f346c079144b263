"""A chat turn: store the user's message, build the context, ask the chat model, store the reply."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, col, select

from shared.chat.client import ChatModel, ChatReply, ChatStream, StoredReplyStream
from shared.chat.models import ChatPublic, ChatTurnIn, ContextStats, Usage
from shared.context.models import ContextPublic
from shared.db.models import ChatSession, ExtractionRun, Message, User
from shared.errors import DomainError, UpstreamError
from shared.flows.build_context import build_context
from shared.records.ingest import NewMessage, StoredRun, ingest_messages
from shared.records.turns import attach_reply, stored_reply
from shared.runtime import Runtime
from shared.tokens import count_tokens

log = logging.getLogger(__name__)

# Sends committed run ids to the extraction queue; does not raise (TaskQueue.extract).
Enqueue = Callable[[list[str]], None]


@dataclass
class _Turn:
    """A turn whose user message is committed; the run is sent at most once."""

    tenant_id: str
    turn: ChatTurnIn
    message_id: str
    run_id: str | None
    run_open: bool  # the run waits for this turn: attach the reply, then send it
    answered: Message | None = None  # its reply, stored before: the message was resent
    messages: list[dict[str, Any]] = field(default_factory=list)
    stats: ContextStats | None = None
    sent: bool = False

    def ids(self) -> dict[str, Any]:
        return {
            "user_id": self.turn.user_external_id,
            "session_id": self.turn.session_external_id,
            "user_message_id": self.message_id,
            "job_id": self.run_id,
        }


def run_chat_turn(
    *, runtime: Runtime, tenant_id: str, turn: ChatTurnIn, enqueue: Enqueue
) -> ChatPublic:
    """The whole turn. A chat model failure raises UpstreamError/UpstreamTimeout (502/504)
    whose details carry the stored user message's id; its extraction is queued anyway."""
    model = runtime.chat_model  # unconfigured → 503 before anything is stored
    stored = _prepare(runtime, tenant_id, turn, enqueue)
    if stored.answered is not None:
        return _finish(runtime, stored, _stored_reply(stored, model), enqueue)
    with _send_on_failure(stored, enqueue):
        reply = model.complete(stored.messages, **_call_args(turn))
    return _finish(runtime, stored, reply, enqueue)


def start_chat_stream(
    *, runtime: Runtime, tenant_id: str, turn: ChatTurnIn, enqueue: Enqueue
) -> ChatTurnStream:
    """Everything up to the chat model's first byte; errors until then raise as in
    run_chat_turn, so the API can still answer 502/504 instead of an event stream."""
    model = runtime.chat_model
    stored = _prepare(runtime, tenant_id, turn, enqueue)
    if stored.answered is not None:
        replayed = StoredReplyStream(_stored_reply(stored, model))
        return ChatTurnStream(runtime, stored, replayed, enqueue)
    with _send_on_failure(stored, enqueue):
        upstream = model.stream(stored.messages, **_call_args(turn))
    return ChatTurnStream(runtime, stored, upstream, enqueue)


class ChatTurnStream:
    """The reply's text deltas; once they end, `result` (and `error` if the model failed).

    The reply stored is what was handed to the client — all of it, or the part sent before
    the model failed or the client went away — so the history matches what the person saw.
    """

    def __init__(
        self,
        runtime: Runtime,
        stored: _Turn,
        upstream: ChatStream | StoredReplyStream,
        enqueue: Enqueue,
    ) -> None:
        self._runtime = runtime
        self._stored = stored
        self._upstream = upstream
        self._enqueue = enqueue
        self.result: ChatPublic | None = None
        self.error: UpstreamError | None = None
        self.interrupted = False  # the client went away before the end

    @property
    def user_message_id(self) -> str:
        return self._stored.message_id

    @property
    def job_id(self) -> str | None:
        return self._stored.run_id

    @property
    def model(self) -> str:
        return self._upstream.model

    def __iter__(self) -> Generator[str, None, None]:
        try:
            yield from self._upstream
        except UpstreamError as exc:
            self.error = exc
        except GeneratorExit:
            self.interrupted = True
            raise
        finally:
            self._upstream.close()
            reply = self._upstream.reply()
            self.result = _finish(self._runtime, self._stored, reply, self._enqueue)
            if self.error is not None:
                _add_ids(self.error, {**self._stored.ids(), "message_ids": self.result.message_ids})
            if self.interrupted:
                log.info(
                    "chat stream ended by the client; the part sent was stored",
                    extra={"message_ids": self.result.message_ids},
                )


def _call_args(turn: ChatTurnIn) -> dict[str, Any]:
    return {
        "model": turn.model,
        "temperature": turn.temperature,
        "max_tokens": turn.max_tokens,
        "options": turn.options,
    }


def _prepare(runtime: Runtime, tenant_id: str, turn: ChatTurnIn, enqueue: Enqueue) -> _Turn:
    """Commit the user's message, then build what the chat model will see."""
    with Session(runtime.engine, expire_on_commit=False) as session:
        stored = _store_user_message(session, runtime, tenant_id, turn)
        session.commit()
    if stored.answered is not None:
        return stored  # answered already: no context, no model call
    with _send_on_failure(stored, enqueue):
        # A session of its own, closed before the model call: no transaction (with SQLite,
        # no write lock) is held while the model answers.
        with Session(runtime.engine) as session:
            context = build_context(
                runtime=runtime,
                session=session,
                tenant_id=tenant_id,
                user_external_id=turn.user_external_id,
                session_external_id=turn.session_external_id,
                query=turn.message.content,
                budget_tokens=turn.budget_tokens,
            )
        stored.messages, stored.stats = _compose(context, stored.message_id, turn)
    return stored


def _store_user_message(
    session: Session, runtime: Runtime, tenant_id: str, turn: ChatTurnIn
) -> _Turn:
    previous = None if turn.message.external_id else _unanswered(session, tenant_id, turn)
    if previous is not None:
        # The same text again right after a turn that got no reply is the client retrying
        # (the openai SDK retries 502/504 by itself): answer it, do not store it twice.
        found = session.get(ExtractionRun, previous.run_id) if previous.run_id else None
        return _Turn(tenant_id, turn, previous.id, found.id if found else None, _open(found))
    result = ingest_messages(
        session=session,
        settings=runtime.settings,
        tenant_id=tenant_id,
        user_external_id=turn.user_external_id,
        session_external_id=turn.session_external_id,
        messages=[turn.message],
        extractor=runtime.settings.extractor_kind,
    )
    # A re-sent external_id comes back as the stored message and its existing run; when a
    # reply was stored for it, that reply is the answer.
    runs = result.runs or result.existing_runs
    run = runs[0] if runs else None
    [message] = result.messages
    answered = (
        None
        if result.runs
        else stored_reply(session=session, chat_id=result.chat_id, seq=message.seq)
    )
    return _Turn(
        tenant_id, turn, message.id, run.id if run else None, _open(run), answered=answered
    )


def _stored_reply(stored: _Turn, model: ChatModel) -> ChatReply:
    """The reply stored for a resent message, as the model's reply (no tokens spent)."""
    assert stored.answered is not None
    return ChatReply(
        content=stored.answered.content,
        model=stored.turn.model or model.model,
        prompt_tokens=0,
        completion_tokens=0,
        finish_reason=None,
    )


def _open(run: ExtractionRun | StoredRun | None) -> bool:
    return run is not None and run.status == "pending" and run.reply_message_id is None


def _unanswered(session: Session, tenant_id: str, turn: ChatTurnIn) -> Message | None:
    """The session's last message when it is this user's identical, unanswered message."""
    chat = session.exec(
        select(ChatSession).where(
            ChatSession.tenant_id == tenant_id,
            ChatSession.external_id == turn.session_external_id,
        )
    ).first()
    if chat is None:
        return None
    last = session.exec(
        select(Message).where(Message.session_id == chat.id).order_by(col(Message.seq).desc())
    ).first()
    if last is None or last.role != "user" or last.content != turn.message.content:
        return None
    owner = session.get(User, chat.user_id)
    return last if owner is not None and owner.external_id == turn.user_external_id else None


def _compose(
    context: ContextPublic, message_id: str, turn: ChatTurnIn
) -> tuple[list[dict[str, Any]], ContextStats]:
    ours = [m.model_dump() for m in context.messages]
    memories = sum(len(items) for items in context.memories.values())
    earlier = len(context.earlier_messages)
    if turn.client_messages is not None:
        # The builder's messages are [memory system message?] + one per history entry; the
        # client sends its own history, so only the memory message is added — after the
        # client's leading system messages: its instructions stay first (and a stable,
        # cacheable prefix), our changing background comes just before the conversation.
        memory = ours[: len(ours) - len(context.history)]
        client = turn.client_messages
        lead = 0
        while lead < len(client) and client[lead].get("role") in ("system", "developer"):
            lead += 1
        tokens = sum(count_tokens(str(m["content"])) for m in memory)
        stats = ContextStats(
            token_count=tokens, memories=memories, earlier_messages=earlier, history=0
        )
        return [*client[:lead], *memory, *client[lead:]], stats
    # The user's message is stored before the context is built, so it normally closes the
    # history already; it is missing only when the budget had no room for it.
    if not (context.history and context.history[-1].message_id == message_id):
        ours.append({"role": "user", "content": turn.message.content})
    stats = ContextStats(
        token_count=context.token_count,
        memories=memories,
        earlier_messages=earlier,
        history=len(context.history),
    )
    return ours, stats


def _finish(runtime: Runtime, stored: _Turn, reply: ChatReply, enqueue: Enqueue) -> ChatPublic:
    """Store the reply (when there is text), link it to the turn's run, then send the run."""
    content = reply.content.replace("\x00", "")  # SQL text columns cannot hold NUL
    message_ids = [stored.message_id]
    try:
        if stored.answered is not None:
            message_ids.append(stored.answered.id)  # a resend: nothing more is stored
        elif content.strip():
            with Session(runtime.engine, expire_on_commit=False) as session:
                result = ingest_messages(
                    session=session,
                    settings=runtime.settings,
                    tenant_id=stored.tenant_id,
                    user_external_id=stored.turn.user_external_id,
                    session_external_id=stored.turn.session_external_id,
                    messages=[NewMessage(role="assistant", content=content)],
                    extractor=runtime.settings.extractor_kind,
                    check_length=False,
                )
                reply_id = result.messages[0].id
                if stored.run_open and stored.run_id:
                    attach_reply(session=session, run_id=stored.run_id, reply_message_id=reply_id)
                session.commit()
            message_ids.append(reply_id)
    finally:
        _send(stored, enqueue)
    return ChatPublic(
        reply=content,
        model=reply.model,
        finish_reason=reply.finish_reason,
        user_id=stored.turn.user_external_id,
        session_id=stored.turn.session_external_id,
        message_ids=message_ids,
        job_id=stored.run_id,
        usage=Usage(**reply.usage),
        context=stored.stats
        or ContextStats(token_count=0, memories=0, earlier_messages=0, history=0),
        duplicate=stored.answered is not None,
    )


def _send(stored: _Turn, enqueue: Enqueue) -> None:
    if stored.run_open and stored.run_id and not stored.sent:
        stored.sent = True
        enqueue([stored.run_id])


@contextmanager
def _send_on_failure(stored: _Turn, enqueue: Enqueue) -> Iterator[None]:
    """The user's message is stored whatever fails next: extract it alone, and say so."""
    try:
        yield
    except Exception as exc:
        _send(stored, enqueue)
        if isinstance(exc, DomainError):
            _add_ids(exc, stored.ids())
        raise


def _add_ids(exc: DomainError, ids: dict[str, Any]) -> None:
    if "user_message_id" not in exc.details:
        exc.message += "; the user's message was stored and will still be remembered"
    exc.details = {**exc.details, **ids}
