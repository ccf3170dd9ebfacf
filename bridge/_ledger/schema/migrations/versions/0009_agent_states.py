"""agent state beside a run (framework integrations resume an agent after a crash)

Revision ID: 0009_agent_states
Revises: 0008_mrtr
Create Date: 2026-12-01

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_agent_states"
down_revision: str | Sequence[str] | None = "0008_mrtr"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bridge_agent_states",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column(
            "run_ref",
            sa.String(length=64),
            sa.ForeignKey("bridge_outer_responses.ref"),
            nullable=False,
        ),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("state_json", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("run_ref", "name", name="uq_agent_state_run_name"),
    )
    op.create_index("ix_bridge_agent_states_principal", "bridge_agent_states", ["principal"])


def downgrade() -> None:
    op.drop_index("ix_bridge_agent_states_principal", table_name="bridge_agent_states")
    op.drop_table("bridge_agent_states")
