"""State changes shared by every kind of background run (extraction, compression)."""

from __future__ import annotations

from shared.db.models import CompressionRun, ExtractionRun, utcnow


def record_error(run: ExtractionRun | CompressionRun, error: str, *, final: bool) -> None:
    """`retrying` while attempts remain (the task retries), `failed` with the reason after."""
    run.status = "failed" if final else "retrying"
    run.error = error[:2000]
    run.updated_at = utcnow()
    if final:
        run.finished_at = run.updated_at
