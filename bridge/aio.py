"""Running the synchronous ledger from async code without blocking the event loop."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ParamSpec, TypeVar

import anyio

P = ParamSpec("P")
T = TypeVar("T")


class LedgerRunner:
    """Runs ledger calls from async code.

    With ``inline=True`` (the default for an embedded SQLite ledger) a call runs directly on
    the event loop: the call-path commits take tens of microseconds there, less than a hop to
    a worker thread. Otherwise (PostgreSQL: network round trips) each call runs in a worker
    thread, a bounded number at a time, so a slow commit never stalls the loop.
    """

    def __init__(self, *, inline: bool = False, max_threads: int = 4) -> None:
        self.inline = inline
        self._limiter = anyio.CapacityLimiter(max_threads)

    async def __call__(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self.inline:
            return fn(*args, **kwargs)
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self._limiter)
