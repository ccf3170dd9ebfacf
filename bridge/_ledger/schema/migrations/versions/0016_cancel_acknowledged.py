"""cancel acknowledged: when the server answered a task's ``tasks/cancel``, so that a process
resuming the handle (a restart, another replica, a durable engine's recovery) does not send an
acknowledged cancel a second time

Revision ID: 0016_cancel_acknowledged
Revises: 0015_resolved_work
Create Date: 2026-12-05

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_cancel_acknowledged"
down_revision: str | Sequence[str] | None = "0015_resolved_work"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("bridge_inner_tasks") as batch_op:
        batch_op.add_column(sa.Column("cancel_acknowledged_at_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bridge_inner_tasks") as batch_op:
        batch_op.drop_column("cancel_acknowledged_at_ms")
