"""Importing transcripts: lines grouped per session, stored in order, one run per user turn."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError
from sqlmodel import Session

from shared.config import Settings
from shared.errors import InvalidInput
from shared.records.ingest import IngestRequest, NewMessage, ingest_batch, validate_content
from shared.records.models import TranscriptLine


@dataclass
class ImportSummary:
    stored: int = 0
    duplicates: int = 0
    run_ids: list[str] = field(default_factory=list)


def import_lines(
    *, session: Session, settings: Settings, tenant_id: str, lines: Sequence[TranscriptLine]
) -> ImportSummary:
    """Store one batch atomically (all or nothing) and commit; the caller enqueues run_ids."""
    summary = ImportSummary()
    # Checked here, once, so an error names the line's index in the batch; ingest_batch
    # stores the requests as they are.
    for i, line in enumerate(lines):
        validate_content(line.content, settings=settings, where=f"messages[{i}] ({line.role})")
    groups: dict[tuple[str, str], list[TranscriptLine]] = {}
    for line in lines:  # dicts keep first-seen order: sessions are stored in file order
        groups.setdefault((line.user_id, line.session_id), []).append(line)
    for (user_external_id, session_external_id), group in groups.items():
        request = IngestRequest(
            tenant_id=tenant_id,
            user_external_id=user_external_id,
            session_external_id=session_external_id,
            messages=[NewMessage.of(g, g.role) for g in group],
            extractor=settings.extractor_kind,
        )
        # One session at a time, in file order (ingest_batch would sort them).
        (result,) = ingest_batch(session=session, settings=settings, requests=[request])
        summary.stored += len(group) - result.duplicates
        summary.duplicates += result.duplicates
        summary.run_ids.extend(r.id for r in result.runs)
    session.commit()
    return summary


def read_jsonl(stream: Iterable[str]) -> Iterator[TranscriptLine]:
    """Parse and validate line by line; a bad line stops the import with its line number."""
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            yield TranscriptLine.model_validate(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"line {number}: not valid JSON ({exc.msg})") from exc
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidInput(f"line {number}: {where}: {first['msg']}") from exc
