"""A prune of one principal's finished runs, one short transaction per batch.

:class:`Prune` walks the principal's runs oldest first (a keyset position, so a run kept
because it is live is passed over once, not read again by every batch) and, per batch of at most
``policy.batch_runs`` runs: selects the finished ones within the policy's bounds
(:mod:`~bridge._ledger.retention.selection`), writes them to the archive if one is given, and
deletes them with everything nested in them (:mod:`~bridge._ledger.retention.removal`), all in
one transaction. A dry run does the same reads in a read transaction and deletes nothing.

Each batch is a call a worker thread makes (:meth:`Prune.step`): the caller pauses
:attr:`Prune.pause_s` between them (on PostgreSQL a multiple of the batch's own time), so a
running bridge's calls go on. On PostgreSQL the batch skips runs a live writer holds and
gives up on a lock it would wait for (``lock_timeout``), so no replica ever waits long on it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection

from bridge._ledger.retention.archive import append_member
from bridge._ledger.retention.policy import RetentionPolicy
from bridge._ledger.retention.removal import delete_runs, read_runs
from bridge._ledger.retention.selection import (
    Position,
    candidates,
    count_boundary,
    unresolved_runs,
    within_bounds,
)
from bridge._ledger.store import Ledger

#: How many removed run references a report lists (the count is always whole).
SAMPLE = 20
#: The longest a PostgreSQL batch waits for a row lock before it gives up (it is retried).
PG_LOCK_TIMEOUT = "1s"


@dataclass(slots=True)
class PruneReport:
    """What a prune removed (or, ``dry_run``, would remove) for one principal.

    ``runs``: finished runs removed; ``rows``: rows removed per table; ``unresolved``: runs
    within the bounds kept for a call of unknown outcome without a final verdict or a lost task
    nobody acknowledged;
    ``archived_bytes``: compressed bytes appended to the archive; ``pages_freed``: SQLite pages
    handed back to the file system; ``sample``: the first removed run references.
    """

    principal: str
    dry_run: bool
    runs: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    unresolved: int = 0
    archived_bytes: int = 0
    pages_freed: int = 0
    batches: int = 0
    sample: list[str] = field(default_factory=list)

    def record(self) -> dict[str, object]:
        """The report as plain JSON data."""
        return {
            "principal": self.principal,
            "dry_run": self.dry_run,
            "runs": self.runs,
            "rows": dict(self.rows),
            "unresolved": self.unresolved,
            "archived_bytes": self.archived_bytes,
            "pages_freed": self.pages_freed,
            "batches": self.batches,
            "sample": list(self.sample),
        }


class Prune:
    """One prune of one principal: call :meth:`step` until it returns False."""

    def __init__(
        self,
        ledger: Ledger,
        principal: str,
        policy: RetentionPolicy,
        *,
        dry_run: bool = False,
        archive: Path | None = None,
    ) -> None:
        if not principal:
            raise ValueError("a principal/tenant is required for every ledger access")
        self._ledger = ledger
        self.principal = principal
        self.policy = policy
        self.archive = archive
        self.report = PruneReport(principal, dry_run)
        self._now = ledger.clock()
        self._position: Position | None = None
        self._bound_known = False
        self._done = not policy.removes_anything
        self._last_step_s = 0.0

    @property
    def pause_s(self) -> float:
        """How long to pause before the next batch. On PostgreSQL, sized to the last one's own
        time, so a prune's share of the server stays bounded when its batches slow down. On
        SQLite the write lock already takes turns with the calls, and a batch's time is mostly
        its wait for that lock: the fixed pause alone."""
        if self._ledger.dialect.name != "postgresql":
            return self.policy.pause_s
        return self.policy.pause_after(self._last_step_s)

    @property
    def done(self) -> bool:
        return self._done

    def step(self) -> bool:
        """Look at the next batch of runs (and remove the finished ones); whether there may be
        more. Each call is one transaction: a crash in it removes nothing of the batch."""
        if self._done:
            return False
        started = time.monotonic()
        try:
            return self._step()
        finally:
            self._last_step_s = time.monotonic() - started

    def _step(self) -> bool:
        with self._transaction() as conn:
            if not self._bound_known:
                keep = self.policy.keep_runs
                self._beyond = None if keep is None else count_boundary(conn, self.principal, keep)
                self._bound_known = True
            bound = within_bounds(self.policy, self._now, self._beyond)
            if bound is None:
                self._done = True
                return False
            lock = self._ledger.dialect.locks_rows_for_update and not self.report.dry_run
            rows = conn.execute(
                candidates(self.principal, bound, self._position, self.policy.batch_runs, lock)
            ).all()
            if not rows:
                self._done = True
                return False
            self._position = Position(int(rows[-1].updated_at_ms), str(rows[-1].ref))
            refs = [str(r.ref) for r in rows]
            unresolved = unresolved_runs(conn, self.principal, refs)
            going = [ref for ref in refs if ref not in unresolved]
            self._take(conn, going)
            self.report.unresolved += len(unresolved)
        self.report.batches += 1
        if len(rows) < self.policy.batch_runs:
            self._done = True
        return not self._done

    def _take(self, conn: Connection, going: list[str]) -> None:
        if not going:
            return
        if self.archive is not None:
            rows = read_runs(conn, self.principal, going)
            self.report.archived_bytes += append_member(
                self.archive, self.principal, len(going), rows
            )
        if not self.report.dry_run:
            for table, count in delete_runs(conn, self.principal, going).items():
                self.report.rows[table] = self.report.rows.get(table, 0) + count
        self.report.runs += len(going)
        room = SAMPLE - len(self.report.sample)
        self.report.sample.extend(going[: max(0, room)])

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        if self.report.dry_run:
            with self._ledger._read() as conn:
                yield conn
            return
        with self._ledger.engine.begin() as conn:
            if self._ledger.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{PG_LOCK_TIMEOUT}'")
            yield conn
