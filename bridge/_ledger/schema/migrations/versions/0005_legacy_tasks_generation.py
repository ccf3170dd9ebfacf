"""the task protocol generation of each inner task (2025-11-25 experimental tasks)

Revision ID: 0005_legacy_tasks
Revises: 0004
Create Date: 2026-12-01

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_legacy_tasks"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # NULL (every existing row) is the Tasks extension, which is all the bridge spoke before.
    with op.batch_alter_table("bridge_inner_tasks") as batch_op:
        batch_op.add_column(sa.Column("task_generation", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bridge_inner_tasks") as batch_op:
        batch_op.drop_column("task_generation")
