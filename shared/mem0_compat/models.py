"""mem0's hosted-API requests and answers, as `MemoryClient` sends and reads them (ADR 0019).

A memory, a search hit and a history entry are in `memories` beside the code that makes them.
No class here has a docstring: it would become the schema's description in /openapi.json.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.inputs import UnixSeconds, storable
from shared.mem0_compat.memories import Mem0Hit, Mem0Memory, owner_of


class Mem0Body(BaseModel):
    # mem0's clients send options tiermem does not use (rerank, fields, …): ignored.
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        return storable(data)


class Mem0Request(Mem0Body):
    user_id: str | None = None
    agent_id: str | None = None
    app_id: str | None = None
    run_id: str | None = None
    filters: dict[str, Any] | None = None

    def owner(self) -> str:
        return owner_of({**self.model_dump(exclude={"filters"}), "filters": self.filters})


class Mem0Message(Mem0Body):
    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(min_length=1)


class AddIn(Mem0Request):
    messages: list[Mem0Message] = Field(min_length=1, max_length=1000)
    metadata: dict[str, Any] | None = None
    infer: bool = True
    timestamp: UnixSeconds | None = Field(
        default=None, description="unix seconds: when it was said"
    )


class AddOut(BaseModel):
    message: str
    status: Literal["PENDING", "SUCCEEDED"]
    event_id: str | None = Field(description="the tiermem job: GET /mem0/v1/event/{id}/")
    results: list[dict[str, Any]] = Field(
        default_factory=list, description="infer=false: the memories written now"
    )


class SearchIn(Mem0Request):
    query: str = Field(min_length=1, max_length=4000)
    top_k: int = Field(default=10, ge=1, le=100)
    threshold: float = Field(default=0.1, ge=-1.0, le=1.0)


class SearchOut(BaseModel):
    results: list[Mem0Hit]


class Page(BaseModel):
    count: int
    next: str | None
    previous: str | None
    results: list[Mem0Memory]


class UpdateIn(Mem0Body):
    text: str | None = Field(default=None, max_length=4000)
    metadata: dict[str, Any] | None = None


class Deleted(BaseModel):
    message: str


class Ping(BaseModel):
    status: str
    org_id: str
    project_id: str
    user_email: str | None


EventStatus = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED"]


class EventOut(BaseModel):
    id: str
    event_type: str
    status: EventStatus
    results: list[dict[str, Any]]
    created_at: dt.datetime
    updated_at: dt.datetime
