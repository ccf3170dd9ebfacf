"""retention: a ledger-wide job lease (one pruner per ledger), and an index for removing the
gateway's handles of a run's tasks

Revision ID: 0013_retention
Revises: 0010_gateway_handles
Create Date: 2026-12-04

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_retention"
down_revision: str | Sequence[str] | None = "0010_gateway_handles"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bridge_ledger_jobs",
        sa.Column("name", sa.String(length=100), primary_key=True),
        sa.Column("holder", sa.String(length=200), nullable=True),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_done_at_ms", sa.BigInteger(), nullable=True),
    )
    op.create_index("ix_bridge_gateway_handles_task_ref", "bridge_gateway_handles", ["task_ref"])


def downgrade() -> None:
    op.drop_index("ix_bridge_gateway_handles_task_ref", table_name="bridge_gateway_handles")
    op.drop_table("bridge_ledger_jobs")
