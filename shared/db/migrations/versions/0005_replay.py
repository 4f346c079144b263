"""replay: replay_jobs, and extraction runs that belong to one

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

A replay re-extracts stored turns as ordinary extraction runs tagged with their job
(replay_job_id, replay_mode). Runs of a dry run or a rebuild keep what they extracted in
`staged` until the job's diff or its per-user swap uses it.
"""
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_str = sqlmodel.sql.sqltypes.AutoString
_time = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "replay_jobs",
        sa.Column("id", _str(length=36), nullable=False),
        sa.Column("tenant_id", _str(length=36), nullable=True),
        sa.Column("mode", _str(length=16), nullable=False),
        sa.Column("selection", sa.JSON(), nullable=False),
        sa.Column("status", _str(length=16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("extractor", _str(length=16), nullable=False),
        sa.Column("extractor_version", _str(length=32), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("started_at", _time(), nullable=True),
        sa.Column("finished_at", _time(), nullable=True),
        sa.Column("updated_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("extraction_runs") as batch_op:
        batch_op.add_column(sa.Column("replay_job_id", _str(length=36), nullable=True))
        batch_op.add_column(sa.Column("replay_mode", _str(length=16), nullable=True))
        batch_op.add_column(sa.Column("staged", sa.JSON(), nullable=True))
        batch_op.create_index("ix_runs_replay_job_status", ["replay_job_id", "status"])


def downgrade() -> None:
    with op.batch_alter_table("extraction_runs") as batch_op:
        batch_op.drop_index("ix_runs_replay_job_status")
        batch_op.drop_column("staged")
        batch_op.drop_column("replay_mode")
        batch_op.drop_column("replay_job_id")
    op.drop_table("replay_jobs")
