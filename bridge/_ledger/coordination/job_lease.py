"""A ledger-wide job that one process at a time runs (the scheduled pruner), whatever the number
of bridges or replicas on the ledger.

One row per job (``bridge_ledger_jobs``): whoever holds an unexpired lease runs it, renewing the
lease while it works; ``last_done_at_ms`` says when a run of it last finished, so that replicas
waking on the same schedule run it once per period between them, not once each. Expiry is on
the database's clock, as the replicas' memberships (:mod:`bridge._ledger.coordination.leases`).
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, insert, or_, update
from sqlalchemy.exc import IntegrityError

from bridge._ledger.schema.dialects import db_now_ms
from bridge._ledger.schema.models import LedgerJob
from bridge._ledger.store import Ledger

JOBS = cast(Table, LedgerJob.__table__)  # type: ignore[attr-defined]


class JobLease:
    """The lease of job ``name`` for ``holder`` (unique per process)."""

    def __init__(self, ledger: Ledger, name: str, holder: str, lease_ms: int) -> None:
        self._ledger = ledger
        self.name = name
        self.holder = holder
        self.lease_ms = lease_ms

    def take(self, every_ms: int) -> bool:
        """Take the lease if nobody holds it and the job last finished ``every_ms`` ago or more
        (or hold it on, if this holder has it); whether this holder now holds it."""
        due = or_(
            JOBS.c.last_done_at_ms.is_(None), JOBS.c.last_done_at_ms <= db_now_ms() - every_ms
        )
        free = or_(JOBS.c.holder == self.holder, JOBS.c.expires_at_ms <= db_now_ms())
        with self._ledger.engine.begin() as conn:
            taken = conn.execute(
                update(JOBS)
                .where(JOBS.c.name == self.name, free, due)
                .values(holder=self.holder, expires_at_ms=db_now_ms() + self.lease_ms)
            ).rowcount
        if taken:
            return True
        try:
            with self._ledger.engine.begin() as conn:
                conn.execute(
                    insert(JOBS).values(
                        name=self.name,
                        holder=self.holder,
                        expires_at_ms=db_now_ms() + self.lease_ms,
                        last_done_at_ms=None,
                    )
                )
        except IntegrityError:
            return False  # the row exists: someone holds it, or the job is not due
        return True

    def renew(self) -> bool:
        """Push the lease's expiry forward; False if another holder has it now."""
        with self._ledger.engine.begin() as conn:
            return bool(
                conn.execute(
                    update(JOBS)
                    .where(JOBS.c.name == self.name, JOBS.c.holder == self.holder)
                    .values(expires_at_ms=db_now_ms() + self.lease_ms)
                ).rowcount
            )

    def finish(self) -> None:
        """The job ran to its end: release the lease and note when."""
        with self._ledger.engine.begin() as conn:
            conn.execute(
                update(JOBS)
                .where(JOBS.c.name == self.name, JOBS.c.holder == self.holder)
                .values(holder=None, expires_at_ms=db_now_ms(), last_done_at_ms=db_now_ms())
            )

    def release(self) -> None:
        """Give the lease up without the job done (another holder may run it at once)."""
        with self._ledger.engine.begin() as conn:
            conn.execute(
                update(JOBS)
                .where(JOBS.c.name == self.name, JOBS.c.holder == self.holder)
                .values(holder=None, expires_at_ms=db_now_ms())
            )
