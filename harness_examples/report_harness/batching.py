"""Store writes asked for in one turn of the event loop, committed in one transaction.

Hundreds of responses running at once each append their events at every step, and on SQLite a
transaction's ``BEGIN IMMEDIATE`` and ``COMMIT`` cost more than the few statements between
them. So a write is not committed the moment it is asked for: the first writer of a turn lets
the event loop run once more (every run that is ready now gets to ask for its writes), then
commits everything asked for meanwhile in one transaction. Each caller is released only once
the transaction holding its write committed, so a write is durable before anyone relies on it,
as it was in a transaction of its own. Writes asked for while a batch commits in a worker
thread (PostgreSQL) make the next batch.

If the shared transaction fails, it is rolled back for everyone and each write is committed
again alone, so only a failing write fails (a write only runs statements on the cursor it is
given: running it twice is safe). A database that cannot take writes at all
(:class:`~bridge.errors.LedgerUnavailable`, after the runner's wait for SQLite's write lock) fails
every write of the batch at once: trying them one by one would wait once per write.

A write is never interrupted once asked for (as a write in a worker thread is not): a caller
cancelled meanwhile is cancelled after its write committed or failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import anyio.lowlevel

from bridge.aio import LedgerRunner
from bridge.errors import LedgerUnavailable
from harness_examples.report_harness.writes import StoreWrite


@dataclass(slots=True)
class _Asked:
    write: StoreWrite
    done: bool = False
    error: BaseException | None = None


@dataclass(slots=True)
class BatchStats:
    """How many writes were committed in how many transactions (shared or alone)."""

    writes: int = 0
    transactions: int = 0
    retried_alone: int = 0  # writes committed again alone after their batch failed


class TurnBatcher:
    """Commits the writes of one turn of the event loop together (see the module docstring)."""

    def __init__(
        self, runner: LedgerRunner, commit_all: Callable[[Sequence[StoreWrite]], None]
    ) -> None:
        self._runner = runner
        self._commit_all = commit_all
        self._asked: list[_Asked] = []
        self._leading = False
        self._batch_ended: anyio.Event | None = None  # made inside the event loop
        self.stats = BatchStats()

    @property
    def queued(self) -> int:
        """Writes asked for and not yet in a batch being committed."""
        return len(self._asked)

    async def commit(self, write: StoreWrite) -> None:
        """Commit ``write`` (with the others asked for in this turn); raises what it raised."""
        asked = _Asked(write)
        self._asked.append(asked)
        with anyio.CancelScope(shield=True):
            while not asked.done:
                if not self._leading:
                    await self._lead()
                else:  # in the batch being committed, or in the next (led by one of its own)
                    await self._ended().wait()
        if asked.error is not None:
            raise asked.error

    def _ended(self) -> anyio.Event:
        if self._batch_ended is None:
            self._batch_ended = anyio.Event()
        return self._batch_ended

    async def _lead(self) -> None:
        """Commit one batch: what was asked for up to the next turn. Writes asked for while it
        commits (in a worker thread) are led by one of their own callers, so no caller waits
        for more than the batch after its own."""
        self._leading = True
        try:
            await anyio.lowlevel.cancel_shielded_checkpoint()  # the others ask for theirs
            batch, self._asked = self._asked, []
            await self._commit(batch)
        finally:
            self._leading = False
            ended, self._batch_ended = self._batch_ended, None
            if ended is not None:
                ended.set()

    async def _commit(self, batch: list[_Asked]) -> None:
        try:
            error = await self._try(batch)
            if error is None or isinstance(error, LedgerUnavailable) or len(batch) == 1:
                self._release(batch, error)
                return
            for asked in batch:  # only the failing write fails
                self.stats.retried_alone += 1
                self._release([asked], await self._try([asked]))
        except BaseException as interrupted:  # never leave a caller waiting
            self._release([asked for asked in batch if not asked.done], interrupted)
            raise

    async def _try(self, batch: list[_Asked]) -> Exception | None:
        """Commit ``batch`` in one transaction: None, or what made it fail (rolled back)."""
        self.stats.transactions += 1
        try:
            await self._runner(self._commit_all, [asked.write for asked in batch])
        except Exception as failed:
            return failed
        self.stats.writes += len(batch)
        return None

    @staticmethod
    def _release(batch: list[_Asked], error: BaseException | None) -> None:
        for asked in batch:
            asked.error, asked.done = error, True
