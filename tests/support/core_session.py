"""The test-only reference executor: the call path's statements through SQLAlchemy Core.

The product runs its precompiled statements on the driver's own connection
(:mod:`bridge._ledger.commit.driver_sessions`); this session runs each statement's Core construct
on pooled SQLAlchemy connections instead (slower, every statement visible to SQLAlchemy's
logging and instrumentation), so ``tests/test_ledger_write_paths.py`` can prove that every route
writes what SQLAlchemy itself would have written. ``Ledger(engine, driver_session=CoreSession(
engine, dialect))`` makes a ledger of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.exc import IntegrityError

from bridge._ledger.commit.driver_sessions import (
    CompiledStatement,
    Cursor,
    DriverSession,
    StatementResult,
)


class CoreCursor(Cursor):
    """:class:`Cursor`'s interface over a SQLAlchemy ``Connection``: executes each statement's
    Core construct (SQLAlchemy binds, type-processes and reads the rows)."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Connection) -> None:
        super().__init__(None)
        self._connection = connection

    def close(self) -> None:
        pass  # nothing of its own: the connection belongs to its transaction

    def run(self, statement: CompiledStatement, params: Mapping[str, Any]) -> int:
        return int(self._connection.execute(statement.construct, dict(params)).rowcount)

    def one(self, statement: CompiledStatement, params: Mapping[str, Any]) -> dict[str, Any] | None:
        row = self._connection.execute(statement.construct, dict(params)).mappings().first()
        return None if row is None else dict(row)

    def scalar(self, statement: CompiledStatement, params: Mapping[str, Any]) -> Any:
        return self._connection.execute(statement.construct, dict(params)).scalar()

    def result(self, statement: CompiledStatement, params: Mapping[str, Any]) -> StatementResult:
        executed = self._connection.execute(statement.construct, dict(params))
        rowcount = int(executed.rowcount)
        row = executed.mappings().first() if executed.returns_rows else None
        return StatementResult(rowcount, None if row is None else dict(row))


class CoreSession(DriverSession):
    """The call-path statements through SQLAlchemy Core on pooled connections, in transactions
    of their own and in those the ledger opens through Core (:meth:`cursor_on`)."""

    def __init__(self, engine: Engine, dialect: Dialect) -> None:
        super().__init__(engine, dialect)
        self.integrity_error = IntegrityError

    @cached_property
    def pipelines(self) -> bool:
        return False  # the reference path: every statement through Core, one at a time

    @contextmanager
    def _core_transaction(self) -> Iterator[Cursor]:
        with self.engine.begin() as connection:
            yield CoreCursor(connection)

    def transaction(self) -> AbstractContextManager[Cursor]:
        return self._core_transaction()

    def cursor_on(self, connection: Connection) -> Cursor:
        return CoreCursor(connection)
