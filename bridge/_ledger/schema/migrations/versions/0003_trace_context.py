"""trace context of outer runs and tool calls

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("bridge_outer_responses", "bridge_dispatch_intents")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch_op:
            batch_op.add_column(sa.Column("trace_id", sa.String(length=32), nullable=True))
            batch_op.add_column(sa.Column("span_id", sa.String(length=16), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_column("span_id")
            batch_op.drop_column("trace_id")
