"""resolved work: when an unknown outcome got its final verdict and when a lost task was
acknowledged, on their rows, so that the attention query and a prune read open work through
partial indexes and never the resolved history (the verdicts and acknowledgements stay in the
events too)

Revision ID: 0015_resolved_work
Revises: 0014_attention_indexes
Create Date: 2026-12-05

"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_resolved_work"
down_revision: str | Sequence[str] | None = "0014_attention_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As the models spell them (a migration keeps its own copy: the models move on).
OLD_LOST_TASK_SQL = "lost_reason IS NOT NULL AND terminal_at_ms IS NULL"
LOST_TASK_SQL = "lost_reason IS NOT NULL AND terminal_at_ms IS NULL AND acknowledged_at_ms IS NULL"
UNRESOLVED_CALL_SQL = "state = 'unknown' AND resolved_at_ms IS NULL"
FINAL = ("admitted", "not_admitted")


def _backfill(conn: sa.Connection) -> None:
    """The verdicts and acknowledgements already recorded (as events) onto their rows."""
    events = sa.table(
        "bridge_events",
        sa.column("principal"),
        sa.column("type"),
        sa.column("payload_json"),
        sa.column("at_ms"),
    )
    calls = sa.table(
        "bridge_dispatch_intents",
        sa.column("ref"),
        sa.column("principal"),
        sa.column("resolved_at_ms"),
    )
    tasks = sa.table(
        "bridge_inner_tasks",
        sa.column("ref"),
        sa.column("principal"),
        sa.column("acknowledged_at_ms"),
    )
    rows = conn.execute(
        sa.select(events.c.principal, events.c.type, events.c.payload_json, events.c.at_ms).where(
            events.c.type.in_(("call.admission_checked", "operator.acknowledged"))
        )
    )
    for principal, kind, payload, at_ms in rows.all():
        data = json.loads(payload)
        if kind == "call.admission_checked" and data.get("admission") in FINAL:
            table, ref, column = calls, data.get("op_ref"), "resolved_at_ms"
        elif data.get("subject") == "lost_task" and data.get("task_ref"):
            table, ref, column = tasks, data.get("task_ref"), "acknowledged_at_ms"
        else:
            continue
        conn.execute(
            sa.update(table)
            .where(table.c.ref == str(ref), table.c.principal == principal)
            .values({column: at_ms})
        )


def upgrade() -> None:
    op.add_column("bridge_dispatch_intents", sa.Column("resolved_at_ms", sa.BigInteger()))
    op.add_column("bridge_inner_tasks", sa.Column("acknowledged_at_ms", sa.BigInteger()))
    _backfill(op.get_bind())
    op.drop_index("ix_inner_lost", table_name="bridge_inner_tasks")
    op.create_index(
        "ix_inner_lost",
        "bridge_inner_tasks",
        ["principal"],
        sqlite_where=sa.text(LOST_TASK_SQL),
        postgresql_where=sa.text(LOST_TASK_SQL),
    )
    op.create_index(
        "ix_dispatch_unresolved",
        "bridge_dispatch_intents",
        ["principal", "state", "resolved_at_ms"],
        sqlite_where=sa.text(UNRESOLVED_CALL_SQL),
        postgresql_where=sa.text(UNRESOLVED_CALL_SQL),
    )


def downgrade() -> None:
    op.drop_index("ix_dispatch_unresolved", table_name="bridge_dispatch_intents")
    op.drop_index("ix_inner_lost", table_name="bridge_inner_tasks")
    op.create_index(
        "ix_inner_lost",
        "bridge_inner_tasks",
        ["principal"],
        sqlite_where=sa.text(OLD_LOST_TASK_SQL),
        postgresql_where=sa.text(OLD_LOST_TASK_SQL),
    )
    # A plain ALTER TABLE ... DROP COLUMN (SQLite 3.35 on): a batch copy of the table would
    # drop the old one under the rows that reference it.
    op.drop_column("bridge_inner_tasks", "acknowledged_at_ms")
    op.drop_column("bridge_dispatch_intents", "resolved_at_ms")
