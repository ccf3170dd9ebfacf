"""initial ledger schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "bridge_outer_responses",
        sa.Column("ref", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("uhp_server", sa.String(length=500), nullable=False),
        sa.Column("response_id", sa.String(length=200), nullable=True),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("harness_id", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=True),
        sa.Column("error_json", sa.Text(), nullable=True),
        sa.Column("last_sequence", sa.BigInteger(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("event_seq", sa.BigInteger(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("ref"),
        sa.UniqueConstraint("principal", "idempotency_key", name="uq_outer_idempotency"),
        sa.UniqueConstraint("principal", "uhp_server", "response_id", name="uq_outer_response"),
    )
    with op.batch_alter_table("bridge_outer_responses", schema=None) as batch_op:
        batch_op.create_index(
            "ix_outer_principal_updated", ["principal", "updated_at_ms"], unique=False
        )

    op.create_table(
        "bridge_dispatch_intents",
        sa.Column("ref", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("run_ref", sa.String(length=64), nullable=False),
        sa.Column("operation_id", sa.String(length=200), nullable=False),
        sa.Column("server_endpoint", sa.String(length=500), nullable=False),
        sa.Column("server_name", sa.String(length=200), nullable=True),
        sa.Column("tool_name", sa.String(length=200), nullable=False),
        sa.Column("args_digest", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("unknown_reason", sa.Text(), nullable=True),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("result_truncated", sa.Boolean(), nullable=False),
        sa.Column("task_ref", sa.String(length=64), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_ref"],
            ["bridge_outer_responses.ref"],
        ),
        sa.PrimaryKeyConstraint("ref"),
        sa.UniqueConstraint("principal", "operation_id", name="uq_dispatch_operation"),
    )
    with op.batch_alter_table("bridge_dispatch_intents", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_bridge_dispatch_intents_run_ref"), ["run_ref"], unique=False
        )
        batch_op.create_index("ix_dispatch_principal_state", ["principal", "state"], unique=False)

    op.create_table(
        "bridge_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("run_ref", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("task_ref", sa.String(length=64), nullable=True),
        sa.Column("payload_json", sa.Text(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_ref"],
            ["bridge_outer_responses.ref"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_ref", "seq", name="uq_event_run_seq"),
    )
    op.create_table(
        "bridge_inner_tasks",
        sa.Column("ref", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("run_ref", sa.String(length=64), nullable=False),
        sa.Column("op_ref", sa.String(length=64), nullable=False),
        sa.Column("response_id", sa.String(length=200), nullable=True),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("server_endpoint", sa.String(length=500), nullable=False),
        sa.Column("server_name", sa.String(length=200), nullable=True),
        sa.Column("server_version", sa.String(length=100), nullable=True),
        sa.Column("credential_ref", sa.String(length=200), nullable=True),
        sa.Column("tool_name", sa.String(length=200), nullable=False),
        sa.Column("args_digest", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("lost_reason", sa.String(length=32), nullable=True),
        sa.Column("lost_detail", sa.Text(), nullable=True),
        sa.Column("server_created_at", sa.String(length=64), nullable=True),
        sa.Column("server_updated_at", sa.String(length=64), nullable=True),
        sa.Column("ttl_ms", sa.BigInteger(), nullable=True),
        sa.Column("poll_interval_ms", sa.BigInteger(), nullable=True),
        sa.Column("next_poll_due_ms", sa.BigInteger(), nullable=True),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("error_json", sa.Text(), nullable=True),
        sa.Column("outcome_truncated", sa.Boolean(), nullable=False),
        sa.Column("outcome_bytes", sa.BigInteger(), nullable=True),
        sa.Column("cancel_requested_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("terminal_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["op_ref"],
            ["bridge_dispatch_intents.ref"],
        ),
        sa.ForeignKeyConstraint(
            ["run_ref"],
            ["bridge_outer_responses.ref"],
        ),
        sa.PrimaryKeyConstraint("ref"),
        sa.UniqueConstraint("principal", "server_endpoint", "task_id", name="uq_inner_task_id"),
    )
    with op.batch_alter_table("bridge_inner_tasks", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_bridge_inner_tasks_run_ref"), ["run_ref"], unique=False
        )
        batch_op.create_index(
            "ix_inner_principal_due", ["principal", "next_poll_due_ms"], unique=False
        )

    op.create_table(
        "bridge_input_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("task_ref", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=500), nullable=False),
        sa.Column("method", sa.String(length=200), nullable=False),
        sa.Column("params_json", sa.Text(), nullable=False),
        sa.Column("payload_digest", sa.String(length=64), nullable=False),
        sa.Column("conflicting_digest", sa.String(length=64), nullable=True),
        sa.Column("first_seen_ms", sa.BigInteger(), nullable=False),
        sa.Column("surfaced_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("answer_digest", sa.String(length=64), nullable=True),
        sa.Column("answered_at_ms", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_ref"],
            ["bridge_inner_tasks.ref"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_ref", "key", name="uq_input_request_key"),
    )
    with op.batch_alter_table("bridge_input_requests", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_bridge_input_requests_principal"), ["principal"], unique=False
        )


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("bridge_input_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_bridge_input_requests_principal"))

    op.drop_table("bridge_input_requests")
    with op.batch_alter_table("bridge_inner_tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_inner_principal_due")
        batch_op.drop_index(batch_op.f("ix_bridge_inner_tasks_run_ref"))

    op.drop_table("bridge_inner_tasks")
    op.drop_table("bridge_events")
    with op.batch_alter_table("bridge_dispatch_intents", schema=None) as batch_op:
        batch_op.drop_index("ix_dispatch_principal_state")
        batch_op.drop_index(batch_op.f("ix_bridge_dispatch_intents_run_ref"))

    op.drop_table("bridge_dispatch_intents")
    with op.batch_alter_table("bridge_outer_responses", schema=None) as batch_op:
        batch_op.drop_index("ix_outer_principal_updated")

    op.drop_table("bridge_outer_responses")
