"""Returning the space removed runs took.

SQLite: a ledger created by this version has ``auto_vacuum=INCREMENTAL`` (set on every
connection, it takes effect when the file has no tables yet), so freed pages can be handed back
to the file system a few at a time: each ``PRAGMA incremental_vacuum(N)`` is one short write
transaction, and writers go on between them. A ledger created before has ``auto_vacuum=NONE``:
its freed pages are reused by later writes (the file stops growing) and one offline ``VACUUM``
(:func:`vacuum_full`, ``bridge db vacuum --full``) converts it.

PostgreSQL: deleted rows are dead tuples its autovacuum makes reusable, without locks a writer
would wait for; nothing is done here.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Engine

from bridge._errors import LedgerUnavailable
from bridge._ledger.commit.availability import (
    backoff_delays,
    is_busy,
    unavailable_reason,
)

#: Pages handed back per step (a few MiB at most: one short write transaction).
PAGES_PER_STEP = 256
_INCREMENTAL = 2
_BUSY_WAIT_S = 5.0


@contextmanager
def _driver(engine: Engine) -> Iterator[sqlite3.Connection]:
    """A pooled connection's own sqlite3 connection, in autocommit (no BEGIN around it)."""
    raw = engine.raw_connection()
    try:
        driver = raw.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        yield driver
    finally:
        raw.close()


def _pragma(engine: Engine, name: str) -> int:
    with _driver(engine) as driver:
        row = driver.execute(f"PRAGMA {name}").fetchone()
    return int(row[0]) if row else 0


def incremental(engine: Engine) -> bool:
    """Whether the SQLite ledger can hand freed pages back while writers go on."""
    return engine.dialect.name == "sqlite" and _pragma(engine, "auto_vacuum") == _INCREMENTAL


def free_pages(engine: Engine) -> int:
    """Pages of the SQLite file that hold nothing now (0 on PostgreSQL)."""
    return _pragma(engine, "freelist_count") if engine.dialect.name == "sqlite" else 0


def _step(engine: Engine, pages: int) -> None:
    """One incremental step in its own transaction (``executescript`` runs the pragma to its
    end; a plain ``execute`` would free a single page), waiting off the loop for a held lock."""
    with _driver(engine) as driver:
        deadline = time.monotonic() + _BUSY_WAIT_S
        next_delay = backoff_delays()
        while True:
            try:
                driver.executescript(f"PRAGMA incremental_vacuum({pages})")
                return
            except sqlite3.Error as exc:
                reason = unavailable_reason(exc)
                if reason is not None:
                    raise LedgerUnavailable(reason) from exc
                if not is_busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(next_delay())


def return_space(
    engine: Engine,
    *,
    pages_per_step: int = PAGES_PER_STEP,
    pause: Callable[[], None] = lambda: None,
    go_on: Callable[[], bool] = lambda: True,
) -> int:
    """Hand the SQLite file's free pages back in short steps (``pause`` between them, while
    ``go_on()``); the pages handed back (0 where the ledger cannot do it incrementally)."""
    if not incremental(engine):
        return 0
    before = free_pages(engine)
    left = before
    while left > 0 and go_on():
        _step(engine, pages_per_step)
        now = free_pages(engine)
        if now >= left:  # another writer took free pages as fast as they were returned
            break
        left = now
        pause()
    with _driver(engine) as driver:  # move what the steps wrote into the file, if no one reads
        driver.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    return max(0, before - left)


def vacuum_full(engine: Engine) -> None:
    """Rebuild the SQLite file (and make it incremental from then on). Writers wait for its
    whole length: run it with the bridge stopped. Nothing on PostgreSQL."""
    if engine.dialect.name != "sqlite":
        return
    with _driver(engine) as driver:
        driver.executescript("PRAGMA auto_vacuum=INCREMENTAL; VACUUM;")
        driver.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
