"""extraction run response_format: which JSON mode the LLM call used, and why (ADR 0018)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-12

A server without structured outputs (llama.cpp's answers json_schema with HTTP 500) gets
the call again in json_object mode; the run says so, and ops lists the models running in
that fallback through a partial index (a few rows among millions). Plain ALTER TABLE, as
in 0007: SQLite adds a nullable column in place.
"""
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FALLBACK = "response_format_note IS NOT NULL"


def upgrade() -> None:
    string = sqlmodel.sql.sqltypes.AutoString
    op.add_column("extraction_runs", sa.Column("response_format", string(length=16), nullable=True))
    op.add_column(
        "extraction_runs", sa.Column("response_format_note", string(length=500), nullable=True)
    )
    op.create_index(
        "ix_runs_format_fallback",
        "extraction_runs",
        ["model", "updated_at"],
        sqlite_where=sa.text(_FALLBACK),
        postgresql_where=sa.text(_FALLBACK),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_format_fallback", table_name="extraction_runs")
    # SQLite drops a column in place since 3.35 (no table rebuild).
    op.execute("ALTER TABLE extraction_runs DROP COLUMN response_format_note")
    op.execute("ALTER TABLE extraction_runs DROP COLUMN response_format")
