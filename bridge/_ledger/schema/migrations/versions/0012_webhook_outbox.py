"""the webhook outbox (attention items to push, per principal) and its one deliverer's lease

Revision ID: 0012_webhook_outbox
Revises: 0010_gateway_handles
Create Date: 2026-12-04

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_webhook_outbox"
down_revision: str | Sequence[str] | None = "0010_gateway_handles"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bridge_webhook_outbox",
        sa.Column("id", sa.String(length=100), primary_key=True),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column(
            "run_ref",
            sa.String(length=64),
            sa.ForeignKey("bridge_outer_responses.ref"),
            nullable=False,
        ),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.BigInteger(), nullable=False),
        sa.Column("next_attempt_ms", sa.BigInteger(), nullable=True),
        sa.Column("delivered_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("failed_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.UniqueConstraint("run_ref", "seq", name="uq_webhook_outbox_event"),
    )
    op.create_index(
        "ix_webhook_outbox_due", "bridge_webhook_outbox", ["principal", "next_attempt_ms"]
    )
    deliverer = op.create_table(
        "bridge_webhook_deliverer",
        sa.Column("name", sa.String(length=32), primary_key=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_incarnation", sa.BigInteger(), nullable=True),
    )
    op.bulk_insert(deliverer, [{"name": "outbox"}])


def downgrade() -> None:
    op.drop_table("bridge_webhook_deliverer")
    op.drop_index("ix_webhook_outbox_due", table_name="bridge_webhook_outbox")
    op.drop_table("bridge_webhook_outbox")
