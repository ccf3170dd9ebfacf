"""When the SQLite ledger cannot take a write now (its write lock is held elsewhere) or at all
(its file was deleted or replaced, it refuses writes).

Waiting for the write lock. Every SQLite connection has a busy timeout of a few milliseconds
(:data:`SQLITE_BUSY_TIMEOUT_MS`): enough to ride out another thread's commit, never long
enough to stall an event loop. A write that still finds the lock held waits in Python instead:

* in a worker thread (no event loop running there), it sleeps with backoff and tries again,
  up to :data:`WRITE_LOCK_WAIT_S`, then raises :class:`~bridge.errors.LedgerUnavailable`;
* on an event loop thread it raises :class:`WriteLockBusy` at once, and the
  :class:`~bridge._ledger.runner.LedgerRunner` awaits a backoff and runs the whole ledger call again
  (so a held lock delays only the writes that need it, never the loop).

Opening the ledger (its migration) waits in place even on an event loop thread
(:func:`waiting_for_the_lock`): it runs before the loop serves anything.

Only the statement that takes the lock (``BEGIN IMMEDIATE``, or a lone autocommit statement)
is ever busy: it failed before anything was written, so trying again is always safe.

A deleted ledger. :class:`LedgerFile` remembers the identity (device, inode) of the file the
ledger opened and compares it with what the path names now. If the file is gone or another
file took its place, every later transaction raises ``LedgerUnavailable`` (the commits would
land in an unlinked file, and a fresh connection would open an empty database) and one error
line is logged. The check is one ``stat`` (about a microsecond): on every transaction of the
SQLAlchemy paths (each costs hundreds of microseconds) and on every
:data:`CALL_PATH_CHECK_EVERY`-th transaction of the bridged call's precompiled path (tens of
microseconds each, so a check per transaction would cost it a few per cent). A commit that
accepts new work (a run registered, a harness's new response) checks the file right after it
commits (``DriverSession.confirm_durable``): work is refused rather than acknowledged into a
file that is gone. A running bridge also looks every :data:`FILE_CHECK_S` (:func:`watch_the_file`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import anyio
from sqlalchemy import Engine

from bridge._errors import LedgerUnavailable

log = logging.getLogger("bridge._ledger")
T = TypeVar("T")

#: A connection's own wait for a lock, in C, before the statement fails busy.
SQLITE_BUSY_TIMEOUT_MS = 5
#: How long a write waits in all for a lock held elsewhere before ``LedgerUnavailable``.
WRITE_LOCK_WAIT_S = 30.0
#: The call path checks the file on one transaction in this many.
CALL_PATH_CHECK_EVERY = 64
#: A running bridge also looks at its file this often, so an idle one notices within it.
FILE_CHECK_S = 0.5

_BACKOFF_FIRST_S = 0.002
_BACKOFF_MAX_S = 0.1
# SQLite result codes (primary) after which the database cannot take the write at all.
_UNAVAILABLE_CODES = {
    "SQLITE_READONLY": "the database file is read-only",
    "SQLITE_CANTOPEN": "the database file cannot be opened",
    "SQLITE_NOTADB": "the file is not a database",
    "SQLITE_CORRUPT": "the database file is corrupt",
    "SQLITE_FULL": "the disk is full",
    "SQLITE_IOERR": "the disk reported an I/O error",
    "SQLITE_PERM": "permission denied",
}


class WriteLockBusy(LedgerUnavailable):
    """Raised on an event loop thread when the write lock is held elsewhere: the
    :class:`~bridge._ledger.runner.LedgerRunner` catches it and tries the call again later. Nothing
    was
    written. (A subclass of ``LedgerUnavailable`` for a caller on a loop without a runner.)"""

    def __init__(self) -> None:
        super().__init__("the write lock is held by another connection")


def backoff_delays(first_s: float = _BACKOFF_FIRST_S) -> Callable[[], float]:
    """Successive waits: doubling from ``first_s`` up to 100 ms."""
    delay = first_s / 2

    def next_delay() -> float:
        nonlocal delay
        delay = min(delay * 2, _BACKOFF_MAX_S)
        return delay

    return next_delay


def is_busy(exc: BaseException) -> bool:
    return getattr(exc, "sqlite_errorname", None) in ("SQLITE_BUSY", "SQLITE_LOCKED")


def unavailable_reason(exc: BaseException) -> str | None:
    """Why a SQLite error means the database cannot take writes at all (``None``: it does
    not; the error is the caller's to handle)."""
    name = getattr(exc, "sqlite_errorname", None)
    if not isinstance(name, str):
        return None
    primary = "_".join(name.split("_")[:2])  # SQLITE_IOERR_WRITE -> SQLITE_IOERR
    return _UNAVAILABLE_CODES.get(primary)


def refuse_if_unavailable(exc: BaseException) -> None:
    """Raise ``LedgerUnavailable`` (from ``exc``) if ``exc`` says the database cannot take
    writes at all; return otherwise."""
    reason = unavailable_reason(exc)
    if reason is not None:
        raise LedgerUnavailable(reason) from exc


def first_line(exc: BaseException) -> str:
    """The driver's own message of a (possibly wrapped) database error, on one line."""
    if isinstance(exc, LedgerUnavailable):
        return exc.reason
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()
    return text[0] if text else type(cause).__name__


_THREAD = threading.local()


def _must_not_block() -> bool:
    """Whether a write finding the lock held must not wait here: on an event loop thread,
    unless inside :func:`waiting_for_the_lock`."""
    return asyncio._get_running_loop() is not None and not getattr(_THREAD, "may_block", False)


@contextmanager
def waiting_for_the_lock() -> Iterator[None]:
    """Writes in this block wait for a held lock even on an event loop thread: for start-up
    work (opening and migrating the ledger) done before the loop serves anything."""
    before = getattr(_THREAD, "may_block", False)
    _THREAD.may_block = True
    try:
        yield
    finally:
        _THREAD.may_block = before


def take_write_lock(begin: Callable[[], T], first_error: sqlite3.Error) -> T:
    """``begin`` failed with ``first_error``: wait for the lock as the thread allows (see the
    module docstring), or translate an error that makes the database unavailable."""
    error: BaseException = first_error
    deadline = time.monotonic() + WRITE_LOCK_WAIT_S
    next_delay = backoff_delays()
    while True:
        if not is_busy(error):
            reason = unavailable_reason(error)
            if reason is None:
                raise error
            raise LedgerUnavailable(reason) from error
        if _must_not_block():
            raise WriteLockBusy() from error
        if time.monotonic() >= deadline:
            raise LedgerUnavailable(
                f"the write lock was held by another connection for {WRITE_LOCK_WAIT_S:g} s"
            ) from error
        time.sleep(next_delay())
        try:
            return begin()
        except sqlite3.Error as retry_error:
            error = retry_error


class LedgerFile:
    """The SQLite file a ledger engine opened, and whether it is still the one at its path."""

    __slots__ = ("_identity", "countdown", "lost", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None
        self.lost: str | None = None  # why the ledger is unavailable, once it is (sticky)
        self.countdown = CALL_PATH_CHECK_EVERY

    def opened(self) -> None:
        """A connection opened the file: remember it (first time) or check it is the same."""
        if self._identity is None:
            stat = os.stat(self.path)
            self._identity = (stat.st_dev, stat.st_ino)
        else:
            self.check()

    def check(self) -> None:
        """Raise ``LedgerUnavailable`` if the file was deleted or replaced since it was opened."""
        if self.lost is None and self._identity is not None:
            try:
                stat = os.stat(self.path)
            except FileNotFoundError:
                self._lose(f"the ledger file {self.path} was deleted")
            else:
                if (stat.st_dev, stat.st_ino) != self._identity:
                    self._lose(f"the ledger file {self.path} was replaced by another file")
        if self.lost is not None:
            raise LedgerUnavailable(self.lost)

    def check_now_and_then(self) -> None:
        """The call path's check: one transaction in :data:`CALL_PATH_CHECK_EVERY` (every one
        once the file is lost)."""
        self.countdown -= 1
        if self.countdown <= 0:
            if self.lost is None:
                self.countdown = CALL_PATH_CHECK_EVERY
            self.check()

    def _lose(self, reason: str) -> None:
        self.lost = reason
        self.countdown = 0
        log.error("%s under the running process: the ledger refuses all further work", reason)


_FILES: weakref.WeakKeyDictionary[Engine, LedgerFile] = weakref.WeakKeyDictionary()


def watch_file(engine: Engine, path: Path) -> LedgerFile:
    watched = _FILES[engine] = LedgerFile(path)
    return watched


def file_of(engine: Engine) -> LedgerFile | None:
    """The file the engine's ledger lives in (``None``: a server database or in memory)."""
    return _FILES.get(engine)


async def watch_the_file(engine: Engine, every_s: float = FILE_CHECK_S) -> None:
    """Look at the ledger's file every ``every_s`` until it is lost (logged once, then every
    transaction refuses): a bridge with nothing to write notices too, and says so at once."""
    watched = file_of(engine)
    while watched is not None and watched.lost is None:
        await anyio.sleep(every_s)
        try:
            watched.check()
        except LedgerUnavailable:
            return
