"""Group commit: short write transactions of concurrent callers committed together.

Leader/follower, as databases do it for their log: a caller whose write finds no commit running
commits it at once, alone, so a lone caller never waits for a batch. Writes that arrive while a
commit runs queue up; when it ends, the first of them leads and commits everything queued so
far in one transaction (one hop to a worker thread, one ``COMMIT`` round trip, one fsync). Each
caller is released only after the transaction holding its write committed, so "recorded before
anyone relies on it" holds for every write exactly as it does for a transaction of its own.

A write that fails inside a shared transaction rolls it back for everyone; the batch is then
committed again one write per transaction, so that only the failing write fails. A write may
therefore run twice: it must only execute statements on the cursor it is given (what has to
happen once, after the commit, goes in its ``settle``).

Pipelined batches (PostgreSQL with psycopg): when every write of a batch is one statement
(:meth:`StagedCommit.one_statement`), the batch is sent in pipeline mode: ``BEGIN`` and all its
statements in one round trip, their results checked, then ``COMMIT``. Otherwise a batch costs a
round trip per statement, and on a busy machine each of those waits for the database process
to be scheduled. The rules above are unchanged: a failing statement or check rolls the whole
batch back, and its writes are then committed one per transaction.

A database that cannot take writes at all (:class:`~bridge.errors.LedgerUnavailable`: a lost
connection, a full disk, SQLite's write lock held elsewhere) fails every write of the batch not
yet committed, at once: committing them one by one would meet the same refusal once per write.
For a runner that waits for SQLite's write lock (an inline
:class:`~bridge._ledger.runner.LedgerRunner`), the lock found busy
(:class:`~bridge._ledger.commit.availability.WriteLockBusy`) leaves the batch's commit to be
run again once the lock is free; a write already committed is never run again.

Gathering a turn (``gather_turn``): the first writer lets the event loop run once more before
it commits, so that every caller ready in this turn of the loop joins its batch. For many
writers whose writes are not on a latency-critical path, and for an inline runner (SQLite on
the event loop), whose commits never overlap, so that nothing would ever queue otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from bridge._errors import LedgerUnavailable
from bridge._ledger.commit.driver_sessions import (
    CompiledStatement,
    Cursor,
    OneStatement,
    StatementResult,
)

C = TypeVar("C")  # what a transaction hands its writes (a cursor)
R = TypeVar("R")
T = TypeVar("T")

#: Runs a blocking function away from the event loop (a worker thread) and awaits it.
Offload = Callable[[Callable[[], None]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class StagedCommit(Generic[C, R, T]):
    """One short write transaction, split so that it can share a transaction with others.

    ``write`` executes its statements (and raises to roll back); ``settle`` runs once, after the
    transaction holding the write committed, on the event loop, so it must not block (commit
    listeners, the value returned); ``failed`` runs where the write was committed (a worker
    thread, or inline) when it failed alone (it may read the ledger to answer instead, or raise).
    """

    write: Callable[[C], R]
    settle: Callable[[R], T]
    failed: Callable[[Exception], T] | None = None
    #: The write as one statement and a check of what it returned (``write`` runs exactly
    #: that): a batch of such writes can be sent in one round trip (:meth:`one_statement`).
    statement: OneStatement[R] | None = None

    @classmethod
    def one_statement(
        cls,
        statement: CompiledStatement,
        params: Mapping[str, Any],
        check: Callable[[StatementResult], R],
        settle: Callable[[R], T],
        failed: Callable[[Exception], T] | None = None,
    ) -> StagedCommit[Cursor, R, T]:
        """A write of one statement, ``check`` turning its result into the write's value (or
        raising to roll back)."""
        one = OneStatement(statement, params, check)
        return StagedCommit(one.run, settle, failed, one)


#: A transaction of one-statement writes sent together, each checked before it commits; the
#: checks' values (``DriverSession.commit_pipelined``).
Pipelined = Callable[[Sequence[OneStatement[Any]]], list[Any]]


class _Queued:
    __slots__ = ("committed", "done", "error", "finished", "leads", "settled", "staged", "written")

    def __init__(self, staged: StagedCommit[Any, Any, Any]) -> None:
        self.staged = staged
        self.done = anyio.Event()
        self.leads = False  # woken to commit the next batch, not because its own one is done
        self.finished = False  # committed, or failed
        self.committed = False
        self.written: Any = None  # what the write returned, for settle
        self.settled: Any = None
        self.error: BaseException | None = None


class GroupCommit(Generic[C]):
    """Commits :class:`StagedCommit` writes from async callers, batching those that queue up.

    ``transaction``: a context manager opening one transaction (committed on a clean exit,
    rolled back on an exception) and yielding what writes execute on. ``pipelined`` (where the
    driver can): a batch made only of :meth:`StagedCommit.one_statement` writes is sent as one
    pipelined transaction, its statements in one round trip instead of one each. Statistics
    for tests and benchmarks: ``transactions`` committed, the ``writes`` they held, how many of
    those transactions were ``pipelined_transactions`` (and how many pipelined batches were
    rolled back: ``pipelined_rolled_back``), the ``batches`` led and
    ``batch_seconds``, the wall time they took until the event loop had them back (handed to a
    worker thread and back, or run inline); transactions
    ``rolled_back`` (a batch or a lone write that failed), and the writes ``retried_alone``
    after their batch failed. ``gather_turn``: see the module docstring. ``run_alone``: commits
    a one-statement write by itself, more cheaply than in a transaction of its own
    (``DriverSession.run_alone``: SQLite's autocommit), for :meth:`commit_alone`.
    """

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[C]],
        pipelined: Pipelined | None = None,
        *,
        gather_turn: bool = False,
        run_alone: Callable[[OneStatement[Any]], Any] | None = None,
    ) -> None:
        self._transaction = transaction
        self._run_alone = run_alone
        self._pipelined = pipelined
        self.gathers_turn = gather_turn
        self.rolled_back = 0
        self.retried_alone = 0
        self.pipelined_transactions = 0
        self.pipelined_rolled_back = 0
        self.batches = 0  # batches led (a batch committed write by write counts once)
        self.batch_seconds = 0.0  # their wall time, until back on the event loop
        self._queue: list[_Queued] = []
        self._leading = False  # a batch is being committed, or its successor handed the lead
        self._loop_thread: int | None = None  # the event loop's thread that batches
        self.transactions = 0
        self.writes = 0

    def commit_alone(self, staged: StagedCommit[C, R, T]) -> T:
        """The write in a transaction of its own, then settled, all in the calling thread,
        nothing batched: for callers whose commits never overlap (an inline runner) and the
        ledger's synchronous writes. A write that fails goes to its ``failed``, as a write that
        fails alone in a batch; a database that cannot take writes (``WriteLockBusy`` among
        them: nothing written, the write may run again) is raised as is."""
        try:
            one = staged.statement
            if one is not None and self._run_alone is not None:
                written: R = self._run_alone(one)
            else:
                with self._transaction() as cursor:
                    written = staged.write(cursor)
        except LedgerUnavailable:
            raise
        except Exception as exc:
            if staged.failed is None:
                raise
            return staged.failed(exc)
        return staged.settle(written)

    @property
    def queued(self) -> int:
        """Writes waiting for the commit running now to end."""
        return len(self._queue)

    async def commit(self, staged: StagedCommit[C, R, T], offload: Offload) -> T:
        """The write committed (with the writes queued beside it), then settled: its value.

        Once handed over a write is seen through, as a call into a worker thread is: a caller
        cancelled meanwhile learns the outcome first and is cancelled afterwards.
        """
        queued = _Queued(staged)
        if self._loop_thread is None:
            self._loop_thread = threading.get_ident()
        with anyio.CancelScope(shield=True):
            if self._loop_thread != threading.get_ident():
                # Another event loop (thread) uses this ledger too: its waits cannot be woken
                # from here, so its writes commit alone.
                await offload(partial(self._commit_batch, [queued]))
                self._settle(queued)
            else:
                self._queue.append(queued)
                if self._leading:
                    await queued.done.wait()
                if not queued.done.is_set() or queued.leads:
                    await self._lead(offload)
        if queued.error is not None:
            raise queued.error
        settled: T = queued.settled
        return settled

    async def _lead(self, offload: Offload) -> None:
        self._leading = True
        if self.gathers_turn:
            await anyio.lowlevel.cancel_shielded_checkpoint()  # the others ask for theirs
        batch, self._queue = self._queue, []
        self.batches += 1
        started = time.perf_counter()
        try:
            await offload(partial(self._commit_batch, batch))
        except Exception as exc:  # the database refused (or the worker failed): whatever
            self._fail_unfinished(batch, exc)  # was not committed yet fails with it
        except BaseException as exc:
            self._fail_unfinished(batch, exc)
            raise
        finally:
            self.batch_seconds += time.perf_counter() - started
            for queued in batch:
                self._settle(queued)
                queued.leads = False
                queued.done.set()
            if self._queue:  # arrived while this batch committed: the first of them leads next
                successor = self._queue[0]
                successor.leads = True
                successor.done.set()
            else:
                self._leading = False

    def _commit_batch(self, batch: list[_Queued]) -> None:
        """In a worker thread (or inline): one transaction for the whole batch (pipelined when
        it can be); one per write after a failure, so that a failing write
        fails alone. ``LedgerUnavailable`` is raised, not given to a write: it stops the
        batch, and run again (the lock free) this commits only the writes still pending."""
        pending = [queued for queued in batch if not queued.finished]
        if len(pending) > 1:
            committed = self._commit_pipelined(pending)
            if committed is None:
                committed = self._commit_together(pending)
            if committed:
                return
            self.rolled_back += 1
            self.retried_alone += len(pending)
        for queued in pending:
            try:
                with self._transaction() as cursor:
                    value = queued.staged.write(cursor)
            except LedgerUnavailable:
                raise
            except Exception as exc:
                self.rolled_back += 1
                self._failed(queued, exc)
            else:
                self.transactions += 1
                self.writes += 1
                self._committed(queued, value)

    def _commit_together(self, batch: list[_Queued]) -> bool:
        """The batch in one transaction: whether it committed (False: rolled back as a whole)."""
        try:
            with self._transaction() as cursor:
                written = [queued.staged.write(cursor) for queued in batch]
        except LedgerUnavailable:
            raise
        except Exception:
            return False
        self.transactions += 1
        self.writes += len(batch)
        for queued, value in zip(batch, written, strict=True):
            self._committed(queued, value)
        return True

    def _commit_pipelined(self, batch: list[_Queued]) -> bool | None:
        """The batch as one pipelined transaction: whether it committed (False: rolled back as
        a whole); None when it cannot be pipelined (no driver support, or a write in it is not
        a single statement)."""
        ones = _statements(batch)
        if self._pipelined is None or ones is None:
            return None
        try:
            values = self._pipelined(ones)
        except LedgerUnavailable:
            raise
        except Exception:
            self.pipelined_rolled_back += 1
            return False
        self._committed_pipelined(batch, values)
        return True

    def _committed_pipelined(self, batch: list[_Queued], values: list[Any]) -> None:
        self.transactions += 1
        self.pipelined_transactions += 1
        self.writes += len(batch)
        for queued, value in zip(batch, values, strict=True):
            self._committed(queued, value)

    @staticmethod
    def _fail_unfinished(batch: list[_Queued], error: BaseException) -> None:
        for queued in batch:
            if not queued.finished:
                queued.finished = True
                queued.error = error

    @staticmethod
    def _committed(queued: _Queued, value: Any) -> None:
        queued.finished = queued.committed = True
        queued.written = value

    @staticmethod
    def _settle(queued: _Queued) -> None:
        if not queued.committed:
            return
        try:
            queued.settled = queued.staged.settle(queued.written)
        except Exception as exc:
            queued.error = exc

    @staticmethod
    def _failed(queued: _Queued, error: Exception) -> None:
        queued.finished = True
        failed = queued.staged.failed
        if failed is None:
            queued.error = error
            return
        try:
            queued.settled = failed(error)
        except Exception as exc:
            queued.error = exc


def _statements(batch: list[_Queued]) -> list[OneStatement[Any]] | None:
    """The batch's writes as single statements; None if any of them is not one."""
    ones: list[OneStatement[Any]] = []
    for queued in batch:
        if queued.staged.statement is None:
            return None
        ones.append(queued.staged.statement)
    return ones
