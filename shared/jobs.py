"""Extraction runs as the API shows them: jobs with a state, attempts and the error text."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel
from sqlmodel import Session

from shared.db.models import ExtractionRun
from shared.errors import NotFound


class JobPublic(BaseModel):
    id: str
    kind: str = "extract_turn"
    # pending → running → done | skipped | failed; "retrying" between attempts
    status: str
    attempts: int
    error: str | None
    message_id: str
    reply_message_id: str | None
    extractor: str  # "llm" or "offline" (the labelled rule-based fallback)
    extractor_version: str | None
    model: str | None  # the model called, on failure too
    # "json_schema" or "json_object"; the note says why json_object when json_schema was
    # configured ("fell back to json_object: the server rejected json_schema (HTTP 500: ...)").
    response_format: str | None = None
    response_format_note: str | None = None
    prompt_hash: str | None
    facts_extracted: int
    facts_invalid: int
    facts_added: int
    facts_merged: int
    facts_superseded: int
    skipped_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    llm_ms: float
    duration_ms: float
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, run: ExtractionRun) -> JobPublic:
        return cls.model_validate(run.model_dump())


def get_job(*, session: Session, job_id: str, tenant_id: str | None) -> ExtractionRun:
    """tenant_id None (the operator) sees every tenant's jobs; another tenant's job is 404."""
    run = session.get(ExtractionRun, job_id)
    if run is None or (tenant_id is not None and run.tenant_id != tenant_id):
        raise NotFound(f"job {job_id} not found")
    return run
