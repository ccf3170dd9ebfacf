"""the POST body of a remotely created run, recorded with its idempotency key (UHP 2026-09-28)

Revision ID: 0007_uhp_request_body
Revises: 0006_input_trust
Create Date: 2026-12-01

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_uhp_request_body"
down_revision: str | Sequence[str] | None = "0006_input_trust"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("bridge_outer_responses") as batch_op:
        batch_op.add_column(sa.Column("request_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bridge_outer_responses") as batch_op:
        batch_op.drop_column("request_json")
