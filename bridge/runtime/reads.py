"""The bridge's reads: runs, tasks, operations, tool listings, and
waiting for tasks to settle. Every read is scoped to one principal of the bridge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio

from bridge.errors import BridgeError, WaitTimedOut
from bridge.ledger.coordination.waiters import CommitNotifier
from bridge.ledger.reads.views import DispatchView, RunView, TaskView
from bridge.ledger.runner import LedgerRunner
from bridge.ledger.store import Ledger
from bridge.mcp.calls.requester import TaskRequester
from bridge.runtime.step_results import OperationRecord

if TYPE_CHECKING:
    import mcp_types


def is_settled(task: TaskView) -> bool:
    """Final for a waiter: a terminal status is stored, or the handle was declared lost."""
    return task.terminal_at_ms is not None or task.lost_reason is not None


class BridgeReads:
    """Read side of :class:`~bridge.facade.Bridge` (set up by its constructor)."""

    ledger: Ledger
    principals: tuple[str, ...]
    requester: TaskRequester
    _db: LedgerRunner
    _notifier: CommitNotifier | None

    def _scope(self, principal: str) -> None:
        if principal not in self.principals:
            raise BridgeError(f"principal {principal!r} is not in this bridge's scope")

    async def _get_run(self, principal: str, run_ref: str) -> RunView:
        """One run of this principal (``NotFound`` for any other)."""
        self._scope(principal)
        return await self._db(self.ledger.for_principal(principal).get_run, run_ref)

    async def _get_task(self, principal: str, task_ref: str) -> TaskView:
        self._scope(principal)
        return await self._db(self.ledger.for_principal(principal).get_task, task_ref)

    async def _get_dispatch(self, principal: str, op_ref: str) -> DispatchView:
        self._scope(principal)
        return await self._db(self.ledger.for_principal(principal).get_dispatch, op_ref)

    async def _list_tasks(
        self, principal: str, *, run_ref: str | None = None, open_only: bool = False
    ) -> list[TaskView]:
        """This principal's task handles (of one run), oldest first; ``open_only``: watched."""
        self._scope(principal)
        tenant = self.ledger.for_principal(principal)
        return await self._db(tenant.list_tasks, run_ref=run_ref, open_only=open_only)

    async def _operation(self, principal: str, operation_id: str) -> OperationRecord | None:
        """What a call with this operation id already did (None: nothing was ever recorded).
        Reading it sends nothing; calling ``call_tool`` again with the id replays it."""
        self._scope(principal)
        tenant = self.ledger.for_principal(principal)
        dispatch = await self._db(tenant.find_dispatch, operation_id)
        if dispatch is None:
            return None
        task = None
        if dispatch.task_ref is not None:
            task = await self._db(tenant.get_task, dispatch.task_ref)
        return OperationRecord(dispatch, task)

    async def _wait_for(
        self, principal: str, task_refs: Sequence[str], timeout: float
    ) -> list[TaskView]:
        """Until every task is settled — terminal, or lost (lost counts as final) — then their
        views in the order asked. Woken by commits on the tasks' runs, this process's or
        another's (no polling). Raises :class:`~bridge.errors.WaitTimedOut` after ``timeout``
        seconds; the tasks go on being watched."""
        self._scope(principal)
        assert self._notifier is not None, "use the bridge inside 'async with'"
        tenant = self.ledger.for_principal(principal)
        deadline = anyio.current_time() + timeout
        runs = {v.run_ref for v in [await self._db(tenant.get_task, r) for r in task_refs]}
        while True:
            with self._notifier.watch(principal, runs) as change:  # armed, then read
                views = [await self._db(tenant.get_task, ref) for ref in task_refs]
                pending = [v for v in views if not is_settled(v)]
                if not pending:
                    return views
                left = deadline - anyio.current_time()
                if left <= 0:
                    raise WaitTimedOut([v.ref for v in pending], timeout)
                await change.wait(left)

    async def list_tools(self, principal: str, server: str) -> list[mcp_types.Tool]:
        """The tools ``server`` lists, through the bridge's own connection and credentials
        (the SDK's ``Tool``: name, description, input schema, annotations). Raises
        ``UnknownServer`` or ``ServerConnectFailed``."""
        self._scope(principal)
        return await self.requester.pool.connection(server).list_tools()
