"""extraction runs extracted together: batch_id and batch_size (issue 25, ADR 0024)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

With TIERMEM_EXTRACTION__BATCH_TURNS above 1, a session's waiting turns are extracted in
one LLM call; the runs claimed together share a batch_id, and batch_size says how many
turns the call read. The new status "waiting" needs no change (status is a short string).
Plain ALTER TABLE, as in 0009: SQLite adds nullable columns in place.
"""
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    string = sqlmodel.sql.sqltypes.AutoString
    op.add_column("extraction_runs", sa.Column("batch_id", string(length=36), nullable=True))
    op.add_column("extraction_runs", sa.Column("batch_size", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE extraction_runs DROP COLUMN batch_size")
    op.execute("ALTER TABLE extraction_runs DROP COLUMN batch_id")
