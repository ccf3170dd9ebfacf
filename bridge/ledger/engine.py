"""Database engines for the ledger: SQLite (WAL) embedded by default, PostgreSQL by URL."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

DEFAULT_SQLITE_PATH = Path("bridge-ledger.db")
SQLITE_BUSY_TIMEOUT_MS = 30_000
SqliteSynchronous = Literal["NORMAL", "FULL"]


def normalize_url(url: str | Path | None) -> str:
    """Accept a SQLAlchemy URL, a plain ``postgresql://`` URL, or a file path for SQLite."""
    if url is None:
        return f"sqlite:///{DEFAULT_SQLITE_PATH}"
    text = str(url)
    if "://" not in text:
        return f"sqlite:///{text}"
    parsed = make_url(text)
    if parsed.drivername in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return text


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def create_ledger_engine(
    url: str | Path | None = None,
    *,
    sqlite_synchronous: SqliteSynchronous = "NORMAL",
    **kwargs: Any,
) -> Engine:
    """Create an engine tuned for short write transactions.

    SQLite: WAL journal, ``synchronous=NORMAL`` by default (durable across process crashes; a
    power loss may drop the last commits; ``FULL`` survives power loss too), a busy timeout,
    and ``BEGIN IMMEDIATE`` so a writer takes the
    write lock up front instead of failing to upgrade a read lock under contention.
    """
    full_url = normalize_url(url)
    if full_url.startswith("sqlite"):
        engine = create_engine(
            full_url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            **kwargs,
        )
        _tune_sqlite(engine, sqlite_synchronous)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(full_url, **kwargs)


def _tune_sqlite(engine: Engine, synchronous: SqliteSynchronous) -> None:
    if synchronous not in ("NORMAL", "FULL"):  # interpolated into a PRAGMA: allow-list only
        raise ValueError(f"sqlite_synchronous must be NORMAL or FULL, not {synchronous!r}")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own BEGIN is deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Readers (marked by the store) take a deferred BEGIN so they never queue for the lock.
        read_only = connection.get_execution_options().get("bridge_read", False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
