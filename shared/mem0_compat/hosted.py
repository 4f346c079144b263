"""mem0's hosted API over tiermem: what each of its routes under /mem0 does (ADR 0019).

The routes in services/api/routes/mem0.py parse the request and call one function here; the
shapes are in `models`, mem0's memory operations in `memories`, infer=false's typed memories
in `writing`. An entity mem0 has never seen answers with nothing rather than 404, as mem0 does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from pydantic import ValidationError
from sqlmodel import Session

from shared.db.models import ExtractionRun, User, new_id, utcnow
from shared.errors import InvalidInput, NotFound
from shared.flows.chat_turn import Enqueue
from shared.flows.forget import delete_user
from shared.flows.import_transcripts import import_lines
from shared.flows.read_memories import list_memories
from shared.flows.search_memories import search_memories
from shared.inputs import ID_MAX_LENGTH
from shared.mem0_compat.memories import (
    Mem0Hit,
    Mem0Memory,
    as_mem0,
    delete_all,
    owner_of,
    run_memories,
)
from shared.mem0_compat.models import (
    AddIn,
    AddOut,
    Deleted,
    EventOut,
    EventStatus,
    Mem0Request,
    Page,
    SearchIn,
    SearchOut,
)
from shared.mem0_compat.typed import require_memory_text
from shared.mem0_compat.writing import Mem0Record, write_records
from shared.memory.reader import get_memory
from shared.records.ingest import validate_content
from shared.records.models import TranscriptLine
from shared.records.users import find_user
from shared.runtime import Runtime
from shared.vectors import point_id

_EVENT_STATUS: dict[str, EventStatus] = {
    "pending": "PENDING",
    "waiting": "PENDING",  # for its session's batch (ADR 0024)
    "retrying": "PENDING",
    "running": "RUNNING",
    "done": "SUCCEEDED",
    "skipped": "SUCCEEDED",
    "failed": "FAILED",
}


def add_messages(
    *, runtime: Runtime, session: Session, tenant_id: str, body: AddIn, enqueue: Enqueue
) -> AddOut:
    """infer=true: stored as turns (`import_lines`), their runs sent to `enqueue`; PENDING with
    the first run as the event. infer=false: typed memories written now; SUCCEEDED with them."""
    owner = body.owner()
    said = utcnow() if body.timestamp is None else dt.datetime.fromtimestamp(body.timestamp, dt.UTC)
    for i, m in enumerate(body.messages):  # bad text is refused before anything is stored
        validate_content(m.content, settings=runtime.settings, where=f"messages[{i}]")
    if not body.infer:
        return _write_now(runtime, session, tenant_id, body, owner, said)
    run_id = body.run_id or f"mem0-{owner}"
    session_external_id = run_id if len(run_id) <= ID_MAX_LENGTH else point_id("mem0", run_id)
    try:
        lines = [
            TranscriptLine.model_validate(
                {"user_id": owner, "session_id": session_external_id, "role": m.role,
                 "content": m.content, "created_at": said},
                strict=False,
            )
            for m in body.messages
        ]  # fmt: skip
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"messages: {where}: {first['msg']}") from exc
    summary = import_lines(
        session=session, settings=runtime.settings, tenant_id=tenant_id, lines=lines
    )
    if summary.run_ids:
        enqueue(summary.run_ids)
    return AddOut(
        message="Memory processing has been queued for background execution",
        status="PENDING",
        event_id=summary.run_ids[0] if summary.run_ids else None,
    )


def _write_now(
    runtime: Runtime, session: Session, tenant_id: str, body: AddIn, owner: str, said: dt.datetime
) -> AddOut:
    kept = [(i, m) for i, m in enumerate(body.messages) if m.role != "system"]
    for i, m in kept:
        require_memory_text(
            m.content,
            where=f"messages[{i}].content",
            otherwise="send it with infer=true or leave it out",
            index=i,
        )
    records = [
        Mem0Record(new_id(), m.content, owner, said, metadata=body.metadata or {}) for _, m in kept
    ]
    written = write_records(runtime=runtime, session=session, tenant_id=tenant_id, records=records)
    user = find_user(session=session, tenant_id=tenant_id, user_external_id=owner)
    added = [get_memory(session=session, user=user, memory_id=i) for i in written.added]
    return AddOut(
        message="memories written",
        status="SUCCEEDED",
        event_id=None,
        results=[
            {"id": m.id, "memory": m.memory, "event": "ADD"} for m in as_mem0(session, added, user)
        ],
    )


def search(*, runtime: Runtime, session: Session, tenant_id: str, body: SearchIn) -> SearchOut:
    user = _user_or_none(session, tenant_id, body.owner())
    if user is None:
        return SearchOut(results=[])
    found = search_memories(
        runtime=runtime,
        session=session,
        user=user,
        query=body.query,
        k=body.top_k,
        min_score=body.threshold,
    )
    return SearchOut(
        results=[
            Mem0Hit(**Mem0Memory.of(m, user.external_id).model_dump(), score=m.score or 0.0)
            for m in found.data
        ]
    )


def page_of(
    *,
    session: Session,
    tenant_id: str,
    body: Mem0Request,
    page: int,
    page_size: int,
    link: Callable[[int], str],
) -> Page:
    """One page of the entity's memories; `link(n)` is the URL of page n."""
    user = _user_or_none(session, tenant_id, body.owner())
    if user is None:
        return Page(count=0, next=None, previous=None, results=[])
    listed = list_memories(
        session=session, user=user, limit=page_size, offset=(page - 1) * page_size
    )
    more = page * page_size < listed.count
    return Page(
        count=listed.count,
        next=link(page + 1) if more else None,
        previous=link(page - 1) if page > 1 else None,
        results=[Mem0Memory.of(m, user.external_id) for m in listed.data],
    )


def remove_all(
    *, runtime: Runtime, session: Session, tenant_id: str, entity_ids: dict[str, str | None]
) -> Deleted:
    """Deletes the memories of the entity `entity_ids` names (user_id, agent_id, …)."""
    user = _user_or_none(session, tenant_id, owner_of(entity_ids))
    count = delete_all(runtime=runtime, session=session, user=user) if user else 0
    return Deleted(message=f"Memories deleted successfully! ({count})")


def remove_entity(
    *, runtime: Runtime, session: Session, tenant_id: str, entity_type: str, entity_id: str
) -> Deleted:
    """Deletes the tiermem user the entity is, with everything of theirs (`delete_user`)."""
    user = _user_or_none(session, tenant_id, owner_of({f"{entity_type}_id": entity_id}))
    if user is None:
        raise NotFound(f"{entity_type} {entity_id!r} not found")
    delete_user(runtime=runtime, session=session, user=user)
    return Deleted(message="Entity deleted successfully.")


def event(*, session: Session, tenant_id: str, event_id: str) -> EventOut:
    """The extraction run `event_id` names, if the tenant's: status and the facts it wrote."""
    run = session.get(ExtractionRun, event_id)
    if run is None or run.tenant_id != tenant_id:
        raise NotFound(f"event {event_id} not found")
    user = session.get(User, run.user_id)
    if user is None:
        raise NotFound(f"event {event_id} not found")
    memories = as_mem0(session, run_memories(session=session, run=run), user)
    return EventOut(
        id=run.id,
        event_type="ADD",
        status=_EVENT_STATUS.get(run.status, "PENDING"),
        results=[{"id": m.id, "event": "ADD", "data": {"memory": m.memory}} for m in memories],
        created_at=run.created_at,
        updated_at=run.updated_at,
    )


def _user_or_none(session: Session, tenant_id: str, external_id: str) -> User | None:
    try:
        return find_user(session=session, tenant_id=tenant_id, user_external_id=external_id)
    except NotFound:
        return None  # mem0 answers an entity without memories with none, not 404
