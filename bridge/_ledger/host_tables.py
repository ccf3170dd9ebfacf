"""The ledger's machinery for a host's own tables: the one supported import for it.

A host that keeps tables of its own beside the bridge's ledger (the example harness stores its
responses and event log so: ``harness_examples/report_harness/store.py``) may run them the way
the ledger runs its own, from these names only, instead of reaching into the ledger's modules:

- :func:`create_ledger_engine` opens a database URL as the ledger does (SQLite WAL and its
  pragmas, PostgreSQL on psycopg); :func:`dialect_of` says what the engine is, and so whether
  its calls run inline on the event loop (``runs_calls_inline``) and gives its driver session
  (``driver_session``: statements compiled once, run on the driver's own connection, a
  :class:`Cursor` per transaction).
- :class:`GroupCommit` commits :class:`StagedCommit` writes of concurrent callers together
  (``gather_turn=True``: a turn of the event loop's worth at a time); :class:`LedgerRunner` runs
  synchronous calls and those commits from async code (inline on SQLite, awaiting a held write
  lock; in worker threads otherwise).
- :func:`refuse_if_unavailable` turns a driver error meaning "the database takes no writes now"
  into :class:`~bridge.errors.LedgerUnavailable`; :func:`first_line` is an error's first line,
  for a log or a refusal.

Everything else under :mod:`bridge._ledger` is the bridge's own and may change without notice.
"""

from __future__ import annotations

from bridge._ledger.commit.availability import first_line, refuse_if_unavailable
from bridge._ledger.commit.driver_sessions import Cursor
from bridge._ledger.commit.group_commit import GroupCommit, StagedCommit
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.schema.dialects import dialect_of
from bridge._ledger.schema.engine import create_ledger_engine

__all__ = [
    "Cursor",
    "GroupCommit",
    "LedgerRunner",
    "StagedCommit",
    "create_ledger_engine",
    "dialect_of",
    "first_line",
    "refuse_if_unavailable",
]
