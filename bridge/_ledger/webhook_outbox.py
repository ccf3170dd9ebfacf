"""The webhook outbox: attention items waiting to be pushed to their principal's endpoint.

Rows are written by the event append (:meth:`TenantScope._append`), in the transaction of the
event that created the item. Here they are read when due and settled: delivered, retried
later, or given up on, which appends a ``webhook_undeliverable`` anomaly to the item's run in
the same transaction, so a push that never arrived is itself something an operator sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update

from bridge import events as ev
from bridge._ledger._base import EVENTS, OUTBOX
from bridge._ledger.attention_events import WEBHOOK_UNDELIVERABLE
from bridge._ledger.reads.queries import WriteScope

_ERROR_CHARS = 500  # the column's size: an endpoint's error text is cut to it


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """One due outbox row with the event that created it (its payload as stored)."""

    id: str
    run_ref: str
    seq: int
    kind: str
    attempts: int
    created_at_ms: int
    event_type: str
    event_json: str


@dataclass(frozen=True, slots=True)
class OutboxFigures:
    """How one principal's outbox stands (for metrics)."""

    pending: int
    delivered: int
    undeliverable: int


class WebhookOutboxWrites(WriteScope):
    """Read due items and settle them, scoped to this principal."""

    def due_webhooks(self, limit: int = 100) -> list[OutboxItem]:
        """Items whose next attempt is due now, oldest first."""
        query = (
            select(
                OUTBOX.c.id,
                OUTBOX.c.run_ref,
                OUTBOX.c.seq,
                OUTBOX.c.kind,
                OUTBOX.c.attempts,
                OUTBOX.c.created_at_ms,
                EVENTS.c.type,
                EVENTS.c.payload_json,
            )
            .join(
                EVENTS,
                (EVENTS.c.run_ref == OUTBOX.c.run_ref) & (EVENTS.c.seq == OUTBOX.c.seq),
            )
            .where(
                self._owned(OUTBOX),
                self._owned(EVENTS),
                OUTBOX.c.next_attempt_ms.is_not(None),
                OUTBOX.c.next_attempt_ms <= self.now,
            )
            .order_by(OUTBOX.c.next_attempt_ms, OUTBOX.c.id)
            .limit(limit)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [
            OutboxItem(
                r.id,
                r.run_ref,
                int(r.seq),
                r.kind,
                int(r.attempts),
                int(r.created_at_ms),
                r.type,
                r.payload_json,
            )
            for r in rows
        ]

    def next_webhook_due_ms(self) -> int | None:
        """When this principal's next undelivered item is due (``None``: nothing pending)."""
        query = select(func.min(OUTBOX.c.next_attempt_ms)).where(self._owned(OUTBOX))
        with self._read() as conn:
            value = conn.execute(query).scalar()
        return None if value is None else int(value)

    def webhook_delivered(self, item_id: str) -> bool:
        """The endpoint took ``item_id`` (2xx). False if it was already settled."""
        return self._settle(item_id, delivered_at_ms=self.now, next_attempt_ms=None) == 1

    def webhook_attempt_failed(self, item_id: str, error: str, retry_at_ms: int) -> bool:
        """An attempt failed; the next one is due at ``retry_at_ms``."""
        return (
            self._settle(item_id, last_error=error[:_ERROR_CHARS], next_attempt_ms=retry_at_ms) == 1
        )

    def webhook_undeliverable(self, item_id: str, error: str) -> ev.Anomaly | None:
        """Give up on ``item_id``: settled as failed, and a ``webhook_undeliverable`` anomaly on
        its run in the same transaction (``None``: it was already settled)."""
        with self._write() as tx:
            row = tx.conn.execute(
                select(OUTBOX.c.run_ref, OUTBOX.c.kind, OUTBOX.c.attempts).where(
                    self._owned(OUTBOX),
                    OUTBOX.c.id == item_id,
                    OUTBOX.c.next_attempt_ms.is_not(None),
                )
            ).first()
            if row is None:
                return None
            self._settle_in(
                tx.conn,
                item_id,
                failed_at_ms=self.now,
                next_attempt_ms=None,
                last_error=error[:_ERROR_CHARS],
            )
            detail = (
                f"webhook {item_id} ({row.kind}) not delivered after {int(row.attempts) + 1} "
                f"attempts: {error}"
            )
            anomaly = ev.Anomaly(kind=WEBHOOK_UNDELIVERABLE, detail=detail)
            appended = self._append(tx, row.run_ref, anomaly)
        assert isinstance(appended, ev.Anomaly)
        return appended

    def webhook_outbox_figures(self) -> OutboxFigures:
        """Counts of this principal's outbox rows by state."""
        query = select(
            func.count().filter(OUTBOX.c.next_attempt_ms.is_not(None)),
            func.count().filter(OUTBOX.c.delivered_at_ms.is_not(None)),
            func.count().filter(OUTBOX.c.failed_at_ms.is_not(None)),
        ).where(self._owned(OUTBOX))
        with self._read() as conn:
            p, d, f = conn.execute(query).one()
        return OutboxFigures(int(p), int(d), int(f))

    def _settle(self, item_id: str, **values: Any) -> int:
        with self._write() as tx:
            return self._settle_in(tx.conn, item_id, **values)

    def _settle_in(self, conn: Any, item_id: str, **values: Any) -> int:
        statement = (
            update(OUTBOX)
            .where(
                self._owned(OUTBOX), OUTBOX.c.id == item_id, OUTBOX.c.next_attempt_ms.is_not(None)
            )
            .values(attempts=OUTBOX.c.attempts + 1, **values)
        )
        return int(conn.execute(statement).rowcount)
