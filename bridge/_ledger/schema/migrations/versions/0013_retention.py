"""retention: a ledger-wide job lease (one pruner per ledger); partial indexes of the open runs
and open tasks (recovery reads them, not the history); indexes a prune's deletes need
(a task's dispatch and a gateway handle's task: the foreign-key checks of a delete look there),
and the runs' (principal, updated) index ends with the ref, so a prune walks runs in order

Revision ID: 0013_retention
Revises: 0012_webhook_outbox
Create Date: 2026-12-04

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_retention"
down_revision: str | Sequence[str] | None = "0012_webhook_outbox"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As the models spell them (a migration keeps its own copy: the models move on).
OPEN_RUN_SQL = "status IS NULL OR status = 'in_progress'"
OPEN_TASK_SQL = "terminal_at_ms IS NULL AND lost_reason IS NULL AND detached_at_ms IS NULL"


def upgrade() -> None:
    op.create_table(
        "bridge_ledger_jobs",
        sa.Column("name", sa.String(length=100), primary_key=True),
        sa.Column("holder", sa.String(length=200), nullable=True),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_done_at_ms", sa.BigInteger(), nullable=True),
    )
    op.create_index("ix_bridge_gateway_handles_task_ref", "bridge_gateway_handles", ["task_ref"])
    op.create_index("ix_bridge_inner_tasks_op_ref", "bridge_inner_tasks", ["op_ref"])
    op.create_index(
        "ix_outer_open",
        "bridge_outer_responses",
        ["principal", "updated_at_ms"],
        sqlite_where=sa.text(OPEN_RUN_SQL),
        postgresql_where=sa.text(OPEN_RUN_SQL),
    )
    op.create_index(
        "ix_inner_open",
        "bridge_inner_tasks",
        ["principal", "created_at_ms", "ref"],
        sqlite_where=sa.text(OPEN_TASK_SQL),
        postgresql_where=sa.text(OPEN_TASK_SQL),
    )
    op.drop_index("ix_outer_principal_updated", table_name="bridge_outer_responses")
    op.create_index(
        "ix_outer_principal_updated",
        "bridge_outer_responses",
        ["principal", "updated_at_ms", "ref"],
    )


def downgrade() -> None:
    op.drop_index("ix_inner_open", table_name="bridge_inner_tasks")
    op.drop_index("ix_outer_open", table_name="bridge_outer_responses")
    op.drop_index("ix_outer_principal_updated", table_name="bridge_outer_responses")
    op.create_index(
        "ix_outer_principal_updated", "bridge_outer_responses", ["principal", "updated_at_ms"]
    )
    op.drop_index("ix_bridge_inner_tasks_op_ref", table_name="bridge_inner_tasks")
    op.drop_index("ix_bridge_gateway_handles_task_ref", table_name="bridge_gateway_handles")
    op.drop_table("bridge_ledger_jobs")
