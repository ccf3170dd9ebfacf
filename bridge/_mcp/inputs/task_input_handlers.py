"""Task input requests meet the host's handlers: the hook the poll scheduler calls where a
task's input request is first recorded, and after every poll (the stuck-input deadline).

:meth:`TaskInputs.recorded` runs :meth:`bridge._mcp.inputs.handlers.InputHandlers.handle` once per
new request, each in its own task (a handler may take long: a person, a model), never inside the
poll. The bridge's own decisions (a decline, a failed handler) are recorded on the task's run
through :class:`TaskInputDecisions`; a recorded decline is delivered by the poller, like any answer
waiting for ``tasks/update``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from anyio.abc import TaskGroup

from bridge import events as ev
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._mcp.inputs.handlers import InputDecisions, InputHandlers, handle_in_background
from bridge._mcp.inputs.stuck_deadline import CancelTask, StuckInputs
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._mcp.servers import ServerPool
from bridge._outcomes import AnswerReceipt, InputRequest
from bridge._policies import InputPolicy

# (principal, task_ref, input_ref, answer) -> receipt: the requester's answer_input
AnswerInput = Callable[[str, str, str, Any], Awaitable[AnswerReceipt]]


def task_input_request(
    answer: AnswerInput, principal: str, task_ref: str, input_ref: str, method: str, params: Any
) -> InputRequest:
    """The typed request for one recorded task input request, answered through ``answer``
    (recorded first, then ``tasks/update``)."""
    send = functools.partial(answer, principal, task_ref, input_ref)
    fields = params if isinstance(params, dict) else {}
    return InputRequest(principal, task_ref, input_ref, method, fields, send)


class TaskInputDecisions(InputDecisions):
    """Records the bridge's decisions about one principal's task input requests."""

    def __init__(
        self, ledger: Ledger, db: LedgerRunner, scheduler: PollScheduler, principal: str
    ) -> None:
        self._tenant = ledger.for_principal(principal)
        super().__init__(db, self._tenant.inputs.record_input_handler_failed)
        self._scheduler = scheduler

    def owner_of(self, request: InputRequest) -> str:
        if request.task_ref is None:  # a call's input (MRTR) is decided by its own rounds
            raise ValueError(f"{request.input_ref} is not a task's input request")
        return request.task_ref

    async def decline(
        self,
        request: InputRequest,
        reason: ev.DeclineReason,
        answer: dict[str, Any] | None,
    ) -> None:
        task_ref = self.owner_of(request)
        await self._db(
            self._tenant.inputs.record_input_declined, task_ref, request.input_ref, reason, answer
        )
        if answer is not None:  # sent with tasks/update before the task's next poll
            self._scheduler.mark_undelivered_answers(task_ref)


class TaskInputs:
    """The scheduler's input hook (see :class:`bridge._mcp.polling.watches.InputObserver`)."""

    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        pool: ServerPool,
        scheduler: PollScheduler,
        task_group: TaskGroup,
        handlers: InputHandlers,
    ) -> None:
        self._ledger = ledger
        self._db = db
        self._pool = pool
        self._scheduler = scheduler
        self._tg = task_group
        self._handlers = handlers
        self._policy = InputPolicy()
        self._answer: AnswerInput | None = None
        self._stuck: StuckInputs | None = None

    def with_policy(
        self, policy: InputPolicy, answer: AnswerInput, cancel: CancelTask, clock: Callable[[], int]
    ) -> TaskInputs:
        """Complete the hook: the input policy, how answers are sent (the requester's
        ``answer_input``) and how a stuck task is cancelled (its ``cancel_task``)."""
        self._policy = policy
        self._answer = answer
        self._stuck = StuckInputs(self._ledger, self._db, policy, clock, cancel)
        return self

    def recorded(
        self, principal: str, task: TaskView, requests: list[ev.TaskInputRequired]
    ) -> None:
        """New input requests of ``task`` are on record: hand each to its handler."""
        config = self._pool.config_for_endpoint(task.server_endpoint)
        server = config.name if config is not None else task.server_endpoint
        assert self._answer is not None, "TaskInputs.with_policy completes the hook"
        for event in requests:
            request = task_input_request(
                self._answer, principal, task.ref, event.input_ref, event.method, event.params
            )
            self._tg.start_soon(self._handle, principal, server, request)

    async def _handle(self, principal: str, server: str, request: InputRequest) -> None:
        decisions = TaskInputDecisions(self._ledger, self._db, self._scheduler, principal)
        await handle_in_background(
            self._handlers, request, server=server, policy=self._policy, decisions=decisions
        )

    async def polled(self, principal: str, task: TaskView, lease: Membership | None) -> None:
        if self._stuck is not None:
            await self._stuck.polled(principal, task, lease)

    def forget(self, task_ref: str) -> None:
        if self._stuck is not None:
            self._stuck.forget(task_ref)
