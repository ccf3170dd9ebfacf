"""Running the synchronous ledger from async code without blocking the event loop."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ParamSpec, TypeVar

import anyio

P = ParamSpec("P")
T = TypeVar("T")


class LedgerRunner:
    """Runs ledger calls in worker threads, a bounded number at a time.

    Ledger writes are short transactions; a worker thread keeps a slow disk or a lock wait
    from stalling every other coroutine (the scheduler, streams) on the loop.
    """

    def __init__(self, max_threads: int = 4) -> None:
        self._limiter = anyio.CapacityLimiter(max_threads)

    async def __call__(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self._limiter)
