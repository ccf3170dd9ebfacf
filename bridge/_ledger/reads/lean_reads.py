"""The reads a waiting step and an event forwarder make on every wake (a task by reference,
a run's events after a sequence number), and those every call and every settled response makes
(a dispatch by operation id, a run's tasks and dispatches), on SQLite, through the driver cursor
this thread already holds for its call-path writes instead of SQLAlchemy Core.

Through Core such a read costs ~0.15 ms (a pooled connection checked out, a deferred
transaction begun and ended, result processing); on the driver cursor it costs a few tens of
microseconds. A lone ``SELECT`` in autocommit is its own consistent snapshot and never takes the
write lock, as the deferred ``BEGIN`` of a Core read does not; several reads that must agree
run in one deferred transaction (:meth:`LeanReads.snapshot`). The statements are the same Core
constructs, compiled once (the queries given to :meth:`LeanReads.rows` on first use). Only a
thread that already holds a cursor reads this way (no pooled connection is ever kept for reads
alone); any driver error hands the read back to Core, which raises as it always did.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Select

from bridge._ledger.commit.driver_sessions import CompiledStatement, Cursor, SqliteDriverSession

#: Columns the SQLite driver hands back as integers that Core turns into ``bool``.
TASK_BOOLEANS = ("outcome_truncated",)
DISPATCH_BOOLEANS = ("result_truncated",)

T = TypeVar("T")


def _as_booleans(columns: dict[str, Any], booleans: tuple[str, ...]) -> dict[str, Any]:
    """Those columns as ``bool`` (a no-op on Core's columns: they already are)."""
    for name in booleans:
        value = columns[name]
        columns[name] = None if value is None else bool(value)
    return columns


class LeanReads:
    """Compiled task-row and events-after reads for one SQLite ledger."""

    def __init__(
        self,
        session: SqliteDriverSession,
        task_by_ref: Select[Any],
        events: Select[Any],
        events_limited: Select[Any],
    ) -> None:
        self._session = session
        self._task_by_ref: CompiledStatement = session.compile(task_by_ref)
        self._events: CompiledStatement = session.compile(events)
        self._events_limited: CompiledStatement = session.compile(events_limited)

    def task_row(
        self, params: dict[str, Any], core: Callable[[], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        """The task's columns as Core would give them (None: no such row)."""
        columns = self._on_held_cursor(lambda cursor: cursor.one(self._task_by_ref, params), core)
        return None if columns is None else _as_booleans(columns, TASK_BOOLEANS)

    def event_payloads(self, params: dict[str, Any], core: Callable[[], list[str]]) -> list[str]:
        """The run's event payloads after ``w_after``, in order (at most ``w_limit`` if given)."""
        statement = self._events_limited if "w_limit" in params else self._events
        return self._on_held_cursor(lambda cursor: cursor.column(statement, params), core)

    def rows(
        self,
        query: Select[Any],
        params: dict[str, Any],
        core: Callable[[], list[dict[str, Any]]],
        booleans: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        """The rows of ``query`` (built once, e.g. by a cached builder: it is compiled on first
        use and kept) as Core would give them, its ``booleans`` columns as ``bool``."""
        found = self._on_held_cursor(
            lambda cursor: cursor.rows(self._session.compiled(query), params), core
        )
        return [_as_booleans(columns, booleans) for columns in found]

    def _on_held_cursor(self, read: Callable[[Cursor], T], core: Callable[[], T]) -> T:
        """``read`` on the cursor this thread holds; Core's read without one, or on any error."""
        cursor = self._session.held_cursor()
        if cursor is None:
            return core()
        try:
            return read(cursor)
        except sqlite3.Error:
            return core()

    def snapshot(self, reads: Callable[[], T], core: Callable[[], T]) -> T:
        """``reads`` (lean reads of this thread) in one deferred transaction, so that they see
        one state of the ledger, as Core's reads in one connection do."""
        cursor = self._session.held_cursor()
        if cursor is None:
            return core()
        try:
            cursor.statement("BEGIN")
        except sqlite3.Error:
            return core()
        try:
            return reads()
        finally:
            cursor.statement("COMMIT")
