"""the operator's loop: an index for the attention query (events of one type of a principal)

Revision ID: 0011_operator_loop
Revises: 0010_gateway_handles
Create Date: 2026-12-04

"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011_operator_loop"
down_revision: str | Sequence[str] | None = "0010_gateway_handles"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Anomalies, verdicts and acknowledgements are events: the attention query reads them by
    # type across a principal's runs.
    op.create_index("ix_events_principal_type", "bridge_events", ["principal", "type"])


def downgrade() -> None:
    op.drop_index("ix_events_principal_type", table_name="bridge_events")
