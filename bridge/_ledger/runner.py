"""Running the synchronous ledger from async code without blocking the event loop."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from time import perf_counter
from typing import ParamSpec, TypeVar

import anyio

from bridge._errors import LedgerUnavailable
from bridge._ledger.commit.availability import (
    WRITE_LOCK_WAIT_S,
    WriteLockBusy,
    backoff_delays,
)
from bridge._ledger.commit.group_commit import GroupCommit, StagedCommit
from bridge._ledger.commit.latency import record_commit

P = ParamSpec("P")
T = TypeVar("T")
C = TypeVar("C")
R = TypeVar("R")


class LedgerRunner:
    """Runs ledger calls from async code.

    With ``inline=True`` (the default for an embedded SQLite ledger) a call runs directly on
    the event loop: the call-path commits take tens of microseconds there, less than a hop to
    a worker thread. Otherwise (PostgreSQL: network round trips) each call runs in a worker
    thread, a bounded number at a time, so a slow commit never stalls the loop.

    An inline write that finds SQLite's write lock held by another connection fails within a
    few milliseconds (:class:`~bridge._ledger.commit.availability.WriteLockBusy`, nothing
    written); the runner then awaits a backoff and runs the call again, up to ``lock_wait_s``, and
    raises :class:`~bridge.errors.LedgerUnavailable` after that. Meanwhile the loop serves
    everything else. Retried calls take turns (one probes the lock at a time), so a hundred waiting
    writes cost the loop no more than one.
    """

    def __init__(
        self, *, inline: bool = False, max_threads: int = 4, lock_wait_s: float = WRITE_LOCK_WAIT_S
    ) -> None:
        self.inline = inline
        self.lock_wait_s = lock_wait_s
        self._limiter = anyio.CapacityLimiter(max_threads)
        self._probe: anyio.Lock | None = None  # made on first use, inside the event loop

    async def __call__(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self.inline:
            try:
                return fn(*args, **kwargs)
            except WriteLockBusy:
                return await self.when_lock_free(fn, *args, **kwargs)
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self._limiter)

    async def commit(self, group: GroupCommit[C], staged: StagedCommit[C, R, T]) -> T:
        """One short write, committed before this returns: the route of every staged write.

        Inline (SQLite on the event loop) calls never overlap, so there is nothing to batch: the
        write is committed alone right here, as any inline call (a held write lock is waited
        for). Otherwise it goes through ``group`` (:mod:`bridge._ledger.commit.group_commit`),
        sharing a transaction with concurrent callers' writes that queue up meanwhile, in a
        worker thread; a group that gathers a turn batches inline too (only the writes not yet
        committed are committed once a held lock is free).
        """
        started = perf_counter()
        if self.inline and not group.gathers_turn:
            committed = await self(group.commit_alone, staged)
        else:
            committed = await group.commit(staged, self)  # a batch's commit runs as ours do
        record_commit("call_path", started)
        return committed

    async def when_lock_free(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run the inline call ``fn`` again once the write lock is free (it just failed busy:
        nothing was written, so it may run again). For callers that run ledger calls inline
        themselves and catch :class:`WriteLockBusy`."""
        if self._probe is None:
            self._probe = anyio.Lock()
        deadline = anyio.current_time() + self.lock_wait_s
        next_delay = backoff_delays()
        async with self._probe:
            while True:
                delay = min(next_delay(), deadline - anyio.current_time())
                if delay <= 0:
                    raise LedgerUnavailable(
                        f"the write lock was held by another connection for {self.lock_wait_s:g} s"
                    )
                await anyio.sleep(delay)
                try:
                    return fn(*args, **kwargs)
                except WriteLockBusy:
                    continue
