"""replica membership leases, leased tasks and runs, dispatcher of each intent

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LEASED_TABLES = ("bridge_outer_responses", "bridge_inner_tasks")


def upgrade() -> None:
    op.create_table(
        "bridge_replicas",
        sa.Column("replica_id", sa.String(length=200), nullable=False),
        sa.Column("incarnation", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("replica_id"),
    )
    for table in LEASED_TABLES:
        with op.batch_alter_table(table) as batch_op:
            batch_op.add_column(sa.Column("lease_owner", sa.String(length=200), nullable=True))
            batch_op.add_column(sa.Column("lease_incarnation", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("bridge_inner_tasks") as batch_op:
        batch_op.create_index("ix_inner_lease", ["lease_owner", "lease_incarnation"])
    with op.batch_alter_table("bridge_dispatch_intents") as batch_op:
        batch_op.add_column(sa.Column("dispatcher_replica", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("dispatcher_incarnation", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bridge_dispatch_intents") as batch_op:
        batch_op.drop_column("dispatcher_incarnation")
        batch_op.drop_column("dispatcher_replica")
    with op.batch_alter_table("bridge_inner_tasks") as batch_op:
        batch_op.drop_index("ix_inner_lease")
    for table in LEASED_TABLES:
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_column("lease_incarnation")
            batch_op.drop_column("lease_owner")
    op.drop_table("bridge_replicas")
