"""detached tasks, durable input-answer delivery, input request references

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("bridge_inner_tasks") as batch_op:
        batch_op.add_column(sa.Column("detached_at_ms", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("bridge_input_requests") as batch_op:
        batch_op.add_column(sa.Column("answer_json", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("delivered_at_ms", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("ref", sa.String(length=64), nullable=True))
        batch_op.create_unique_constraint("uq_input_request_ref", ["ref"])
    # Rows written before this revision get a reference derived from their id.
    op.execute("UPDATE bridge_input_requests SET ref = 'in_legacy' || id WHERE ref IS NULL")


def downgrade() -> None:
    with op.batch_alter_table("bridge_input_requests") as batch_op:
        batch_op.drop_constraint("uq_input_request_ref", type_="unique")
        batch_op.drop_column("ref")
        batch_op.drop_column("delivered_at_ms")
        batch_op.drop_column("answer_json")
    with op.batch_alter_table("bridge_inner_tasks") as batch_op:
        batch_op.drop_column("detached_at_ms")
