"""run worker: which Celery worker claimed an extraction run

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Ops compares it with the live worker heartbeats: a run left `running` by a worker that
is gone shows as orphaned instead of running until Redis or the sweeper sends it again.
"""
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("extraction_runs") as batch_op:
        batch_op.add_column(
            sa.Column("worker", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("extraction_runs") as batch_op:
        batch_op.drop_column("worker")
