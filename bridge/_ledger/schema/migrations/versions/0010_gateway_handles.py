"""task handles the gateway issued to its MCP clients (digests only, bound to a principal)

Revision ID: 0010_gateway_handles
Revises: 0009_agent_states
Create Date: 2026-12-08

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_gateway_handles"
down_revision: str | Sequence[str] | None = "0009_agent_states"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bridge_gateway_handles",
        sa.Column("handle_sha256", sa.String(length=64), primary_key=True),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column(
            "task_ref",
            sa.String(length=64),
            sa.ForeignKey("bridge_inner_tasks.ref"),
            nullable=False,
        ),
        sa.Column("op_ref", sa.String(length=64), nullable=False),
        sa.Column("issued_at_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_bridge_gateway_handles_principal", "bridge_gateway_handles", ["principal"])


def downgrade() -> None:
    op.drop_index("ix_bridge_gateway_handles_principal", table_name="bridge_gateway_handles")
    op.drop_table("bridge_gateway_handles")
