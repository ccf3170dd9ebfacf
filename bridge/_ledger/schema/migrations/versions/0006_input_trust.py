"""input trust: input requests the bridge declined, and stuck inputs already reported

Revision ID: 0006_input_trust
Revises: 0005_legacy_tasks
Create Date: 2026-12-06

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_input_trust"
down_revision: str | Sequence[str] | None = "0005_legacy_tasks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("bridge_input_requests") as batch_op:
        batch_op.add_column(sa.Column("declined_at_ms", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("stuck_at_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bridge_input_requests") as batch_op:
        batch_op.drop_column("stuck_at_ms")
        batch_op.drop_column("declined_at_ms")
