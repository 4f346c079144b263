"""fact slots v2: multi-valued slots keep a colon, likes and dislikes one slot per thing

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26

Issue 15: slots lose their subject (every fact of a user is about that user: `identity/
location`), an ending ("Rex passed away", "broke up with Tom") finds the facts it ends by
the slot's family, the part before the colon (`fact/pet:rex`, `relationship/boyfriend:
tom`), and "loves jazz", "no longer likes jazz" and "likes jazz again" share the slot
`preference/about:jazz` whatever topic each was filed under. Every stored fact's slot is
computed again from its type and details by the schemas of this release; where that leaves
two active facts of a user in one slot, the newer stays and the older is superseded by it,
as the writer would have done. Run `tiermem reindex` afterwards to drop the superseded
facts' vectors (searches skip them meanwhile). A later change of the slot rules needs a
revision of its own: this one imports the current rules.
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
    # Nothing to undo in the schema; the v1 slots are not kept. Facts stay as they are: a
    # v1 writer never matches a v2 slot, so it adds beside them instead of superseding
    # them, until the next upgrade recomputes every slot again.
    pass


