"""The bridge's parts a run handle works through (:class:`BridgeServices`), and the reads the
bridge and its run handles share: input requests as the host answers them, and waiting for
tasks to settle. Every read is scoped to one principal."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from bridge import events as ev
from bridge._errors import BridgeError, WaitTimedOut
from bridge._ledger.coordination.waiters import CommitNotifier
from bridge._ledger.reads.views import TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._mcp.calls.requester import TaskRequester
from bridge._mcp.inputs.task_input_handlers import task_input_request
from bridge._outcomes import InputRequest
from bridge._policies import Policies
from bridge._runtime.outer_runs import OuterRuns
from bridge._telemetry.outer_spans import OuterSpans


@dataclass(frozen=True, slots=True)
class BridgeServices:
    """What a :class:`~bridge.Bridge` built once and lends to its run handles."""

    ledger: Ledger
    db: LedgerRunner  # the one ledger runner
    requester: TaskRequester
    spans: OuterSpans
    outer: OuterRuns
    policies: Callable[[], Policies]
    notifier: Callable[[], CommitNotifier | None]  # None until the bridge is entered

    def waker(self) -> CommitNotifier:
        notifier = self.notifier()
        if notifier is None:
            raise BridgeError("use the bridge inside 'async with' (it is not open)")
        return notifier


def is_settled(task: TaskView) -> bool:
    """Final for a waiter: a terminal status is stored, or the handle was declared lost."""
    return task.terminal_at_ms is not None or task.lost_reason is not None


def input_request(
    services: BridgeServices, principal: str, event: ev.InputRequiredEvent
) -> InputRequest:
    """The typed request a ``task.input_required`` (or, MRTR, ``call.input_required``) event
    announces."""
    if isinstance(event, ev.CallInputRequired):
        return services.requester.rounds.input_request(
            principal, event.op_ref, event.input_ref, event.method, event.params
        )
    answer = services.requester.answer_input
    return task_input_request(
        answer, principal, event.task_ref, event.input_ref, event.method, event.params
    )


async def pending_inputs(
    services: BridgeServices, principal: str, run_ref: str | None
) -> list[InputRequest]:
    """Unanswered input requests of the principal's open tasks (of one run), oldest first, then
    those of calls waiting for input before any task (MRTR)."""
    tenant = services.ledger.for_principal(principal)
    views = await services.db(tenant.reads.pending_input_requests)
    if run_ref is not None:
        of_run = {t.ref for t in await services.db(tenant.reads.list_tasks, run_ref=run_ref)}
        views = [v for v in views if v.task_ref in of_run]
    answer = services.requester.answer_input
    tasks = [
        task_input_request(answer, principal, v.task_ref, v.ref, v.method, v.params) for v in views
    ]
    return tasks + await services.requester.rounds.pending(principal, run_ref)


async def wait_for(
    services: BridgeServices, principal: str, task_refs: Sequence[str], timeout: float
) -> list[TaskView]:
    """Until every task is settled, then their views in the order asked (see
    :meth:`bridge.Run.wait_for`)."""
    notifier = services.waker()
    tenant = services.ledger.for_principal(principal)
    deadline = anyio.current_time() + timeout
    runs = {v.run_ref for v in [await services.db(tenant.reads.get_task, r) for r in task_refs]}
    while True:
        with notifier.watch(principal, runs) as change:  # armed, then read
            views = [await services.db(tenant.reads.get_task, ref) for ref in task_refs]
            pending = [v for v in views if not is_settled(v)]
            if not pending:
                return views
            left = deadline - anyio.current_time()
            if left <= 0:
                raise WaitTimedOut([v.ref for v in pending], timeout)
            await change.wait(left)
