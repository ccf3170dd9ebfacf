"""How a process learns that another process committed events: the database side of waking.

In process, the ledger calls its listeners after each commit that appended events; across
processes the database has to tell:

* PostgreSQL: :class:`CommitPublisher` (a ledger listener every PostgreSQL ledger installs)
  follows each such commit with ``pg_notify('bridge_commits', '<run_ref> <seq>')``; one
  :class:`CommitListener` per process holds a ``LISTEN`` connection and hands each
  notification on. The payload is a bridge-local run reference and a sequence number: no
  principal, no task id, no credential.
* SQLite has no notifications between processes: :class:`SqliteChangeProbe` answers "has any
  connection committed since I last asked?" with ``PRAGMA data_version`` on a connection of its
  own, one query per process per tick whatever the number of waiters (the caller backs the tick
  off while nothing changes). Where the ledger's calls run on the event loop the waiters ask the
  writing connection instead (``SqliteDriverSession.others_committed``), which this process's
  own commits leave alone.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger("bridge._ledger.commit.commit_signals")

CHANNEL = "bridge_commits"
#: How long the listening thread blocks on its socket before checking it was asked to stop
#: (a backstop: :meth:`CommitListener.stop` wakes it at once with a notification).
LISTEN_SLICE_S = 5.0
_WAKE = "wake"
RECONNECT_MIN_S = 0.25
RECONNECT_MAX_S = 5.0

#: ``(run_ref, seq)`` of a commit another process announced; ``(None, 0)``: notifications may
#: have been missed (the listening connection was re-established), anything may have changed.
RemoteCommit = Callable[[str | None, int], None]


class CommitPublisher:
    """A ledger listener: announces each commit that appended events to every process that
    listens on :data:`CHANNEL` (PostgreSQL). Runs after the commit in the committing thread;
    a failure to announce is logged, never raised: the commit itself stands."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __call__(self, _principal: str, run_ref: str, seq: int) -> None:
        try:
            with self._engine.connect() as conn:
                conn.exec_driver_sql("SELECT pg_notify(%s, %s)", (CHANNEL, f"{run_ref} {seq}"))
                conn.commit()
        except SQLAlchemyError as exc:
            log.warning("could not announce a commit to other processes: %s", type(exc).__name__)


def parse_payload(payload: str) -> tuple[str, int] | None:
    """``'<run_ref> <seq>'`` → ``(run_ref, seq)``; None for anything else on the channel."""
    ref, _, seq = payload.partition(" ")
    if not ref or not seq.isdigit():
        return None
    return ref, int(seq)


class CommitListener:
    """One thread with one ``LISTEN`` connection (taken out of the engine's pool), handing
    every announced commit to ``on_commit``. A lost connection is re-established with
    backoff, and then ``on_commit(None, 0)`` says notifications may have been missed."""

    def __init__(self, engine: Engine, on_commit: RemoteCommit) -> None:
        self._engine = engine
        self._on_commit = on_commit
        self._stop = threading.Event()
        self.listening = threading.Event()  # set once LISTEN is in place
        self._thread = threading.Thread(target=self._run, name="bridge-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and close the connection (blocks until the thread has ended)."""
        self._stop.set()
        if self.listening.is_set():  # wake the thread out of its wait on the socket
            try:
                with self._engine.connect() as conn:
                    conn.exec_driver_sql("SELECT pg_notify(%s, %s)", (CHANNEL, _WAKE))
                    conn.commit()
            except SQLAlchemyError:
                pass  # it wakes by itself within LISTEN_SLICE_S
        self._thread.join(timeout=LISTEN_SLICE_S + 1.0)

    def _run(self) -> None:
        backoff = RECONNECT_MIN_S
        first = True
        while not self._stop.is_set():
            try:
                self._listen(missed=not first)
            except Exception as exc:  # psycopg's errors and SQLAlchemy's alike
                self.listening.clear()
                log.warning("commit listener lost its connection: %s", type(exc).__name__)
                first = False
                self._stop.wait(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX_S)
            else:
                return

    def _listen(self, *, missed: bool) -> None:
        pooled = self._engine.raw_connection()
        conn = pooled.driver_connection
        pooled.detach()  # this connection belongs to the listener, not to the pool
        if conn is None:
            raise RuntimeError("the ledger's pool gave no driver connection")
        try:
            conn.autocommit = True
            conn.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            if missed:
                self._on_commit(None, 0)
            while not self._stop.is_set():
                for note in conn.notifies(timeout=LISTEN_SLICE_S):
                    if self._stop.is_set():
                        break
                    parsed = parse_payload(note.payload)
                    if parsed is not None:
                        self._on_commit(*parsed)
        finally:
            pooled.close()


class SqliteChangeProbe:
    """``PRAGMA data_version`` on a connection of its own: it changes whenever any other
    connection (this process's or another's) commits to the file."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._last = self._version()

    def _version(self) -> int:
        with self._lock:
            row = self._conn.execute("PRAGMA data_version").fetchone()
        return int(row[0])

    def changed(self) -> bool:
        """Did anyone commit since the last call?"""
        version = self._version()
        changed, self._last = version != self._last, version
        return changed

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def sqlite_file(engine: Engine) -> str | None:
    """The SQLite file behind ``engine``; None for an in-memory database (one process only)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") and "mode=memory" in database:
        return None
    return database
