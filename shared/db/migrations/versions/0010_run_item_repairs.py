"""extraction runs: repaired and dropped items, and the json_object+schema format (issue 25)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26

A run counts the items the server repaired (a field left out, filled with its default)
apart from those it dropped, and keeps why it dropped them: a run whose every item was
dropped ends `dropped`, listed and retried like a failed one. response_format grows to 32
characters for "json_object+schema" (llama.cpp's schema inside json_object): PostgreSQL
alters the column in place; SQLite, which cannot, rebuilds the table in batch mode (it does
not enforce a VARCHAR length, but the declared type is what the models are checked against).
"""
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "extraction_runs",
        sa.Column("facts_repaired", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column("extraction_runs", sa.Column("dropped_reasons", sa.JSON(), nullable=True))
    with op.batch_alter_table("extraction_runs") as batch:
        batch.alter_column(
            "response_format",
            type_=sqlmodel.sql.sqltypes.AutoString(length=32),
            existing_type=sqlmodel.sql.sqltypes.AutoString(length=16),
            existing_nullable=True,
        )


def downgrade() -> None:
    op.execute("ALTER TABLE extraction_runs DROP COLUMN dropped_reasons")
    op.execute("ALTER TABLE extraction_runs DROP COLUMN facts_repaired")
