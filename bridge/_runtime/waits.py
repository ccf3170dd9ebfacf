"""How :meth:`bridge.Run.call_tool` waits on one step: for a task to close (within
the step's deadline), or for a call waiting for input (MRTR) to send its answered leg.

Both are woken by commits on the step's run, this process's or another's: each read happens
with the watch already armed, so a commit between the read and the wait is never missed.
"""

from __future__ import annotations

import anyio

from bridge._ledger.coordination.waiters import CommitNotifier
from bridge._ledger.reads.views import TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import TenantLedger
from bridge._lifecycle import CallState, TaskStatus
from bridge._runtime.step_results import RecoverableFailure, TaskSettled


async def until_answered(
    notifier: CommitNotifier, db: LedgerRunner, tenant: TenantLedger, run_ref: str, op_ref: str
) -> str:
    """Block until the call waiting for input has sent its next leg and heard back;
    its operation id."""
    while True:
        with notifier.watch(tenant.principal, run_ref) as change:  # armed, then read
            dispatch = await db(tenant.reads.get_dispatch, op_ref)
            if dispatch.state not in (CallState.INPUT_REQUIRED, CallState.SENT):
                return dispatch.operation_id
            await change.wait(None)


async def until_closed(
    notifier: CommitNotifier,
    db: LedgerRunner,
    tenant: TenantLedger,
    op_ref: str,
    task: TaskView,
    deadline_s: float,
    ask: bool,
) -> TaskSettled | RecoverableFailure:
    """Block until the task closes. ASK does not count time spent waiting for input."""
    budget = deadline_s
    while True:
        with notifier.watch(tenant.principal, task.run_ref) as change:  # armed, then read
            current = await db(tenant.reads.get_task, task.ref)
            if not current.is_open:
                return TaskSettled(op_ref, current)
            if budget <= 0:
                reason = f"the step's wait deadline ({deadline_s:g} s) passed"
                await db(tenant.tasks.record_step_failure, task.ref, reason)
                return RecoverableFailure(op_ref, current, reason)
            waiting_for_host = ask and current.status is TaskStatus.INPUT_REQUIRED
            started = anyio.current_time()
            await change.wait(None if waiting_for_host else budget)
            if not waiting_for_host:
                budget -= anyio.current_time() - started
