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
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import anyio

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
    listeners, the value returned); ``failed`` runs in a worker thread when the write failed
    alone (it may read the ledger to answer instead, or raise).
    """

    write: Callable[[C], R]
    settle: Callable[[R], T]
    failed: Callable[[Exception], T] | None = None


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
    rolled back on an exception) and yielding what writes execute on. Statistics for tests and
    benchmarks: ``transactions`` committed, and the ``writes`` they held.
    """

    def __init__(self, transaction: Callable[[], AbstractContextManager[C]]) -> None:
        self._transaction = transaction
        self._queue: list[_Queued] = []
        self._leading = False  # a batch is being committed, or its successor handed the lead
        self._loop_thread: int | None = None  # the event loop's thread that batches
        self.transactions = 0
        self.writes = 0

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
        batch, self._queue = self._queue, []
        try:
            await offload(partial(self._commit_batch, batch))
        except BaseException as exc:  # the worker itself failed: nobody's write is known
            for queued in batch:
                if not queued.finished:
                    queued.error = exc
            raise
        finally:
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
        """In a worker thread: one transaction for the whole batch; one per write after a
        failure, so that a failing write fails alone."""
        if len(batch) > 1:
            try:
                with self._transaction() as cursor:
                    written = [queued.staged.write(cursor) for queued in batch]
            except Exception:
                pass  # rolled back as a whole: commit them one by one below
            else:
                self.transactions += 1
                self.writes += len(batch)
                for queued, value in zip(batch, written, strict=True):
                    self._committed(queued, value)
                return
        for queued in batch:
            try:
                with self._transaction() as cursor:
                    value = queued.staged.write(cursor)
            except Exception as exc:
                self._failed(queued, exc)
            else:
                self.transactions += 1
                self.writes += 1
                self._committed(queued, value)

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
