"""fact slots v2: multi-valued slots keep a colon, likes and dislikes one slot per thing

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26

Issue 15: an ending ("Rex passed away", "broke up with Tom") finds the facts it ends by
the slot's family, the part before the colon (`fact/ana/pet:rex`, `relationship/ana/
boyfriend:tom`), and "loves jazz", "no longer likes jazz" and "likes jazz again" share the
slot `preference/ana/about:jazz` whatever topic each was filed under. Every stored fact's
slot is computed again from its type, subject and details by the current schemas; where
that leaves two active facts in one slot, the newer stays and the older is superseded by
it, as the writer would have done.
"""
from collections.abc import Sequence

from alembic import op

from shared.memory.slot_upgrade import recompute_slots

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    recompute_slots(op.get_bind())


def downgrade() -> None:
    # The v1 slots are not kept; the writer of v1 reads v2 slots as unknown slots (nothing
    # is lost, an old fact is just not superseded by a new one until upgraded again).
    pass


