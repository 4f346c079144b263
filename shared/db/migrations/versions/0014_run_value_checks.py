"""extraction runs: the known values asked about, and the ones changed (issue 25, ADR 0032)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

The model is asked what the value of each known fact its reply touched is now;
`ending_checks` counts the questions, `values_changed` the answers that replaced or ended
a known value. Existing runs asked none: the server default 0 is their truth.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for name in ("ending_checks", "values_changed"):
        op.add_column(
            "extraction_runs",
            sa.Column(name, sa.Integer(), nullable=False, server_default="0"),
        )


def downgrade() -> None:
    for name in ("ending_checks", "values_changed"):
        op.execute(f"ALTER TABLE extraction_runs DROP COLUMN {name}")
