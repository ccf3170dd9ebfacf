"""Task handles the gateway issued to its MCP clients (``bridge gateway``).

A handle is a bearer capability: whoever holds it (and authenticates as its principal) may read,
answer and cancel the task. So only its SHA-256 is stored, bound to the principal that called;
a lookup by another principal finds nothing, exactly like an unknown handle.
"""

from __future__ import annotations

import hashlib
from typing import cast

from sqlalchemy import Table, insert, select

from bridge._ledger.reads.queries import WriteScope
from bridge._ledger.schema.models import GatewayHandle

GATEWAY_HANDLES = cast(Table, GatewayHandle.__table__)  # type: ignore[attr-defined]


def handle_digest(handle: str) -> str:
    return hashlib.sha256(handle.encode()).hexdigest()


class GatewayHandleWrites(WriteScope):
    """Record and resolve gateway handles, scoped to this principal."""

    def record_gateway_handle(self, handle: str, task_ref: str, op_ref: str) -> None:
        """Bind ``handle`` to this principal's task (``NotFound`` for any other task),
        committed before the handle is given to the client."""
        with self._write() as tx:
            self._task_row(tx.conn, task_ref)
            tx.conn.execute(
                insert(GATEWAY_HANDLES).values(
                    handle_sha256=handle_digest(handle),
                    principal=self.principal,
                    task_ref=task_ref,
                    op_ref=op_ref,
                    issued_at_ms=self.now,
                )
            )

    def gateway_handle_task(self, handle: str) -> str | None:
        """The task ref ``handle`` names for this principal (``None``: unknown, or another
        principal's)."""
        with self._read() as conn:
            ref = conn.execute(
                select(GATEWAY_HANDLES.c.task_ref).where(
                    self._owned(GATEWAY_HANDLES),
                    GATEWAY_HANDLES.c.handle_sha256 == handle_digest(handle),
                )
            ).scalar_one_or_none()
        return str(ref) if ref is not None else None
