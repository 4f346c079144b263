"""extraction runs: whether the model was asked again (issue 25, ADR 0031)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28

A run whose model reply had items and kept none asks the model once more, in the same
conversation, with why each item was dropped; `asked_again` says it did. Existing runs
were never asked again: the server default false is their truth.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "extraction_runs",
        sa.Column("asked_again", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE extraction_runs DROP COLUMN asked_again")
