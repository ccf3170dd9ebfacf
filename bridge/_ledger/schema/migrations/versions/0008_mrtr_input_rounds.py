"""MRTR: input requests of a call before any task (op_ref, leg), and the rounds of a call

Revision ID: 0008_mrtr
Revises: 0007_uhp_request_body
Create Date: 2026-12-01

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_mrtr"
down_revision: str | Sequence[str] | None = "0007_uhp_request_body"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bridge_call_rounds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("op_ref", sa.String(length=64), nullable=False),
        sa.Column("leg", sa.BigInteger(), nullable=False),
        sa.Column("request_state", sa.Text(), nullable=True),
        sa.Column("arguments_json", sa.Text(), nullable=False),
        sa.Column("received_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("retried_at_ms", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["op_ref"], ["bridge_dispatch_intents.ref"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("op_ref", "leg", name="uq_call_round_leg"),
    )
    op.create_index(
        op.f("ix_bridge_call_rounds_principal"), "bridge_call_rounds", ["principal"], unique=False
    )
    with op.batch_alter_table("bridge_input_requests") as batch_op:
        batch_op.alter_column("task_ref", existing_type=sa.String(length=64), nullable=True)
        batch_op.add_column(sa.Column("op_ref", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("leg", sa.BigInteger(), nullable=True))
        batch_op.create_foreign_key(
            "fk_input_request_op_ref", "bridge_dispatch_intents", ["op_ref"], ["ref"]
        )
        batch_op.create_unique_constraint("uq_input_request_call_key", ["op_ref", "leg", "key"])


def downgrade() -> None:
    op.execute("DELETE FROM bridge_input_requests WHERE task_ref IS NULL")
    with op.batch_alter_table("bridge_input_requests") as batch_op:
        batch_op.drop_constraint("uq_input_request_call_key", type_="unique")
        batch_op.drop_constraint("fk_input_request_op_ref", type_="foreignkey")
        batch_op.drop_column("leg")
        batch_op.drop_column("op_ref")
        batch_op.alter_column("task_ref", existing_type=sa.String(length=64), nullable=False)
    op.drop_index(op.f("ix_bridge_call_rounds_principal"), table_name="bridge_call_rounds")
    op.drop_table("bridge_call_rounds")
