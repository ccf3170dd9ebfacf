"""attention indexes: partial indexes of the lost tasks with no outcome and of the inputs not
answered, so that the attention query and recovery read the inbox, not the history

Revision ID: 0014_attention_indexes
Revises: 0013_retention
Create Date: 2026-12-05

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_attention_indexes"
down_revision: str | Sequence[str] | None = "0013_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As the models spell them (a migration keeps its own copy: the models move on).
LOST_TASK_SQL = "lost_reason IS NOT NULL AND terminal_at_ms IS NULL"
UNANSWERED_INPUT_SQL = "answered_at_ms IS NULL"


def upgrade() -> None:
    op.create_index(
        "ix_inner_lost",
        "bridge_inner_tasks",
        ["principal"],
        sqlite_where=sa.text(LOST_TASK_SQL),
        postgresql_where=sa.text(LOST_TASK_SQL),
    )
    op.create_index(
        "ix_inputs_unanswered",
        "bridge_input_requests",
        ["principal"],
        sqlite_where=sa.text(UNANSWERED_INPUT_SQL),
        postgresql_where=sa.text(UNANSWERED_INPUT_SQL),
    )


def downgrade() -> None:
    op.drop_index("ix_inputs_unanswered", table_name="bridge_input_requests")
    op.drop_index("ix_inner_lost", table_name="bridge_inner_tasks")
