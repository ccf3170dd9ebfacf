"""The composition root: the one ledger runner every part of a bridge shares, and the lease
holder that wires a replica's claims to the requester and the followers through constructors,
not by overwriting callbacks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import RunView, TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._mcp.calls.requester import TaskRequester

RunsClaimed = Callable[[str, Membership, list[RunView]], Awaitable[None]]


def ledger_runner(ledger: Ledger) -> LedgerRunner:
    """The one runner every part of a bridge uses (inline for an embedded SQLite ledger)."""
    return LedgerRunner(inline=ledger.dialect.runs_calls_inline)


class BridgeLeaseHolder:
    """What a replica hands its claims to: handles to the requester's scheduler, runs to the
    bridge's followers. Losing the membership drops both (one place, one callback)."""

    def __init__(
        self,
        requester: TaskRequester,
        follows: dict[str, anyio.CancelScope],
        follow_claimed: RunsClaimed,
    ) -> None:
        self._requester = requester
        self._follows = follows  # the bridge's live followers by run_ref (shared, not copied)
        self._follow_claimed = follow_claimed

    async def take_tasks(self, principal: str, member: Membership, tasks: list[TaskView]) -> None:
        await self._requester.take_claimed(principal, member, tasks)

    async def take_runs(self, principal: str, member: Membership, runs: list[RunView]) -> None:
        await self._follow_claimed(principal, member, runs)

    def drop_held(self) -> None:
        self._requester.scheduler.forget_leased()
        for scope in self._follows.values():
            scope.cancel()

    def watched_tasks(self) -> int:
        return self._requester.scheduler.watched_count

    def followed_runs(self) -> int:
        return len(self._follows)
