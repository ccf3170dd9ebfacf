"""What differs between the ledger's databases, in one class per dialect (as DBOS does).

A :class:`LedgerDialect` is chosen once, when a :class:`~bridge._ledger.store.Ledger` is opened
(``ledger.dialect``); the rest of the ledger asks it instead of testing the database's name.

* :class:`SqliteDialect`: embedded, one file. WAL journal, ``synchronous`` NORMAL or FULL,
  ``BEGIN IMMEDIATE`` for writers (so no row locks are needed), positional driver SQL.
* :class:`PostgresDialect`: a server (psycopg 3). Writers serialise per record on
  ``SELECT … FOR UPDATE``; replicas may share it.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

from sqlalchemy import BigInteger, Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import Dialect, ExceptionContext
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from bridge._errors import LedgerUnavailable
from bridge._ledger.commit.availability import (
    SQLITE_BUSY_TIMEOUT_MS,
    file_of,
    take_write_lock,
    unavailable_reason,
    watch_file,
)
from bridge._ledger.commit.driver_sessions import DriverSession, SqliteDriverSession

SqliteSynchronous = Literal["NORMAL", "FULL"]


class LedgerDialect(ABC):
    """The base: what the ledger needs to know about its database."""

    name: ClassVar[str]
    #: Whether ledger calls made from async code run inline on the event loop (True: SQLite,
    #: whose call-path commits take tens of microseconds) or in a worker thread (False: a
    #: server database, where a call waits on the network).
    runs_calls_inline: ClassVar[bool]
    #: Whether a read-then-write locks the rows it read (``SELECT … FOR UPDATE``).
    locks_rows_for_update: ClassVar[bool]
    #: SQL for the database server's current time in Unix epoch milliseconds.
    now_ms_sql: ClassVar[str]

    @abstractmethod
    def create_engine(
        self, url: str, *, sqlite_synchronous: SqliteSynchronous = "NORMAL", **kwargs: Any
    ) -> Engine:
        """An engine on ``url`` tuned for this database's short write transactions."""

    @abstractmethod
    def statement_dialect(self) -> Dialect:
        """The dialect the call-path statements are compiled for (the driver's paramstyle)."""

    def driver_session(self, engine: Engine) -> DriverSession:
        """Where the call-path statements run: the driver's own connection."""
        return DriverSession(engine, self.statement_dialect())


class SqliteDialect(LedgerDialect):
    name = "sqlite"
    runs_calls_inline = True
    locks_rows_for_update = False  # BEGIN IMMEDIATE already serialises writers
    now_ms_sql = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"

    def create_engine(
        self, url: str, *, sqlite_synchronous: SqliteSynchronous = "NORMAL", **kwargs: Any
    ) -> Engine:
        """WAL journal, ``synchronous`` as asked (NORMAL: durable across a process crash, a
        power loss may drop the last commits; FULL: durable across a power loss too, slower
        commits), a busy timeout of a few milliseconds (a longer wait for the lock happens
        in Python, off the event loop: :mod:`bridge._ledger.commit.availability`), and
        ``BEGIN IMMEDIATE`` so a writer takes the write lock up front instead of failing to
        upgrade a read lock under contention. A file database is watched: deleted or
        replaced under the process, it refuses further work."""
        if sqlite_synchronous not in ("NORMAL", "FULL"):
            raise ValueError(
                f"sqlite_synchronous must be NORMAL or FULL, not {sqlite_synchronous!r}"
            )
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            **kwargs,
        )
        database = engine.url.database
        watched = None
        if database and database != ":memory:" and not database.startswith("file:"):
            watched = watch_file(engine, Path(database).absolute())

        if watched is not None:

            @event.listens_for(engine, "do_connect")
            def _before_connect(*_: Any) -> None:
                # Before SQLite opens the path: it would create an empty database there.
                watched.check()

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
            # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own is deferred).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            # A new file (no page yet) is made incremental: pages freed by a prune can then be
            # handed back while writers go on (bridge._ledger.retention.vacuum). Only then:
            # on a file with tables the pragma would want the write lock, for nothing.
            if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
                cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={sqlite_synchronous}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.close()
            if watched is not None:
                watched.opened()

        @event.listens_for(engine, "handle_error")
        def _on_error(context: ExceptionContext) -> BaseException | None:
            # A database that cannot take writes at all (read-only, full...) is unavailable.
            reason = unavailable_reason(context.original_exception)
            return LedgerUnavailable(reason) if reason is not None else None

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Any) -> None:
            if watched is not None:
                watched.check()
            driver_connection = connection.connection.driver_connection
            # Readers (marked by the ledger) take a deferred BEGIN: they never queue for the lock.
            # On the driver itself, as the writers' BEGIN: through SQLAlchemy it costs more
            # than the short read it opens.
            if connection.get_execution_options().get("bridge_read", False):
                driver_connection.execute("BEGIN")
                return
            try:
                driver_connection.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                take_write_lock(partial(driver_connection.execute, "BEGIN IMMEDIATE"), exc)

        return engine

    def statement_dialect(self) -> Dialect:
        return sqlite.dialect(paramstyle="qmark")

    def driver_session(self, engine: Engine) -> DriverSession:
        return SqliteDriverSession(engine, self.statement_dialect(), file_of(engine))


class PostgresDialect(LedgerDialect):
    name = "postgresql"
    runs_calls_inline = False
    locks_rows_for_update = True
    now_ms_sql = "(floor(extract(epoch from clock_timestamp()) * 1000))::bigint"

    def create_engine(
        self, url: str, *, sqlite_synchronous: SqliteSynchronous = "NORMAL", **kwargs: Any
    ) -> Engine:
        """``sqlite_synchronous`` does not apply (PostgreSQL commits are durable)."""
        kwargs.setdefault("pool_pre_ping", True)
        return create_engine(url, **kwargs)

    def statement_dialect(self) -> Dialect:
        return postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]


_DIALECTS: dict[str, LedgerDialect] = {d.name: d for d in (SqliteDialect(), PostgresDialect())}


def _dialect_named(name: str) -> LedgerDialect:
    try:
        return _DIALECTS[name]
    except KeyError:
        raise ValueError(f"the ledger runs on SQLite or PostgreSQL, not {name}") from None


def dialect_for_url(url: str) -> LedgerDialect:
    """The dialect of a full SQLAlchemy URL."""
    return _dialect_named(make_url(url).get_backend_name())


def dialect_of(engine: Engine) -> LedgerDialect:
    return _dialect_named(engine.dialect.name)


class db_now_ms(FunctionElement[int]):  # lower case: reads as the SQL function it renders
    """The database server's current time in Unix epoch milliseconds."""

    type = BigInteger()
    inherit_cache = True


@compiles(db_now_ms)
def _now_ms(element: db_now_ms, compiler: SQLCompiler, **kw: Any) -> str:
    dialect = _DIALECTS.get(compiler.dialect.name)
    if dialect is None:
        raise CompileError(f"leases need PostgreSQL or SQLite, not {compiler.dialect.name}")
    return dialect.now_ms_sql
