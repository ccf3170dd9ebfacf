"""A run handle: one principal's outer run, bound once, with every step taken inside it.

    run = await bridge.register_served_run("acme", response_id=..., session_id=..., harness_id=...)
    step = await run.call_tool("reports", "generate_report", {"quarter": "Q3"})
    async for event in run.subscribe(): ...

Get one from :meth:`Bridge.register_served_run <bridge.facade.Bridge.register_served_run>`
(a response the harness serves) or :meth:`Bridge.run <bridge.facade.Bridge.run>` (a run
already recorded, e.g. after a restart). A handle holds no state of its own beyond the two
names: it is cheap to make, and two handles of one run are interchangeable.

A task, input or call named to a handle must belong to its run: anything else is
:class:`~bridge.errors.NotFound`, as another principal's records are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from bridge import events as ev
from bridge.errors import NotFound
from bridge.ids import is_call_ref
from bridge.ledger.agent_states import AgentStateView
from bridge.ledger.reads.views import DispatchView, RunView, TaskView
from bridge.lifecycle import Admission, OuterStatus
from bridge.outcomes import AnswerReceipt, InputRequest
from bridge.policies import WaitMode
from bridge.runtime.step_results import OperationRecord, StepOutcome


class RunOwner(Protocol):
    """What a run handle needs from the bridge that made it (:class:`~bridge.facade.Bridge`
    implements it; the principal-scoped operations it names are not public on their own)."""

    async def _call_tool(
        self,
        principal: str,
        run_ref: str,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        operation_id: str | None,
        wait: WaitMode | None,
        wait_deadline_s: float | None,
    ) -> StepOutcome: ...

    async def _record_outer_status(
        self, principal: str, run_ref: str, status: OuterStatus, *, error: Any = None
    ) -> None: ...

    async def _answer_input(
        self, principal: str, task_ref: str, input_ref: str, response: Any
    ) -> AnswerReceipt: ...

    async def pending_inputs(
        self, principal: str, run_ref: str | None = None
    ) -> list[InputRequest]: ...

    def input_request(self, principal: str, event: ev.InputRequiredEvent) -> InputRequest: ...

    async def _cancel_task(self, principal: str, task_ref: str) -> bool: ...

    async def _detach_task(self, principal: str, task_ref: str) -> bool: ...

    async def _resolve_unknown_outcome(
        self, principal: str, op_ref: str, admission: Admission
    ) -> None: ...

    def _subscribe(
        self, principal: str, run_ref: str, *, after_seq: int = 0
    ) -> AsyncIterator[ev.BridgeEvent]: ...

    async def _get_run(self, principal: str, run_ref: str) -> RunView: ...

    async def _get_task(self, principal: str, task_ref: str) -> TaskView: ...

    async def _get_dispatch(self, principal: str, op_ref: str) -> DispatchView: ...

    async def _list_tasks(
        self, principal: str, *, run_ref: str | None = None, open_only: bool = False
    ) -> list[TaskView]: ...

    async def _operation(self, principal: str, operation_id: str) -> OperationRecord | None: ...

    async def _wait_for(
        self, principal: str, task_refs: Sequence[str], timeout: float
    ) -> list[TaskView]: ...

    async def _save_agent_state(
        self,
        principal: str,
        run_ref: str,
        name: str,
        state: Any,
        *,
        expected_version: int | None = None,
    ) -> int: ...

    async def _agent_state(
        self, principal: str, run_ref: str, name: str
    ) -> AgentStateView | None: ...


class Run:
    """One outer run of one principal (``ref``: the bridge's ``run_…`` reference)."""

    __slots__ = ("_owner", "principal", "ref")

    def __init__(self, owner: RunOwner, principal: str, ref: str) -> None:
        self._owner = owner
        self.principal = principal
        self.ref = ref

    def __repr__(self) -> str:
        return f"Run(principal={self.principal!r}, ref={self.ref!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Run)
            and (other.principal, other.ref) == (self.principal, self.ref)
            and other._owner is self._owner
        )

    def __hash__(self) -> int:
        return hash((self.principal, self.ref))

    # -- the outer response ------------------------------------------------------------------
    async def view(self) -> RunView:
        """The run as recorded now: its UHP ids, status, stream position and event count."""
        return await self._owner._get_run(self.principal, self.ref)

    async def record_status(self, status: OuterStatus, *, error: Any = None) -> None:
        """The harness reports its own response's status (a served run). Inner tasks are not
        touched, except as the outer-cancel / outer-end policies say."""
        await self._owner._record_outer_status(self.principal, self.ref, status, error=error)

    # -- steps ---------------------------------------------------------------------------------
    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        operation_id: str | None = None,
        wait: WaitMode | None = None,
        wait_deadline_s: float | None = None,
    ) -> StepOutcome:
        """One bridged MCP tool call in this run, waited for as the policy (or ``wait``) says.

        With an ``operation_id`` the call is idempotent: calling again with the same id
        reports what the first call recorded and sends nothing (see :meth:`operation`)."""
        return await self._owner._call_tool(
            self.principal,
            self.ref,
            server,
            tool,
            arguments,
            operation_id=operation_id,
            wait=wait,
            wait_deadline_s=wait_deadline_s,
        )

    async def operation(self, operation_id: str) -> OperationRecord | None:
        """What the call with this operation id recorded in this run (None: nothing). Reading
        it sends nothing."""
        record = await self._owner._operation(self.principal, operation_id)
        if record is None or record.dispatch.run_ref != self.ref:
            return None
        return record

    async def resolve_unknown_outcome(self, op_ref: str, admission: Admission) -> None:
        """Say whether a call of this run whose outcome is unknown was admitted by its server
        (recorded once, as the host's verdict)."""
        await self._owned_call(op_ref)
        await self._owner._resolve_unknown_outcome(self.principal, op_ref, admission)

    # -- tasks ---------------------------------------------------------------------------------
    async def task(self, task_ref: str) -> TaskView:
        """One task handle of this run."""
        task = await self._owner._get_task(self.principal, task_ref)
        if task.run_ref != self.ref:
            raise NotFound("task", task_ref)
        return task

    async def tasks(self, *, open_only: bool = False) -> list[TaskView]:
        """This run's task handles, oldest first; ``open_only``: those still watched."""
        return await self._owner._list_tasks(self.principal, run_ref=self.ref, open_only=open_only)

    async def wait_for(self, task_refs: Sequence[str], timeout: float) -> list[TaskView]:
        """Until every task is settled (terminal, or lost), then their views in the order asked;
        :class:`~bridge.errors.WaitTimedOut` after ``timeout`` seconds (they stay watched)."""
        for task_ref in task_refs:
            await self.task(task_ref)
        return await self._owner._wait_for(self.principal, task_refs, timeout)

    async def cancel(self, task_ref: str) -> bool:
        """Ask the server to cancel a task of this run (``tasks/cancel``, recorded first as the
        host's intent). True when the server acknowledged; the task's status says whether it
        stopped."""
        await self.task(task_ref)
        return await self._owner._cancel_task(self.principal, task_ref)

    async def detach(self, task_ref: str) -> bool:
        """Stop watching a task of this run without cancelling it."""
        await self.task(task_ref)
        return await self._owner._detach_task(self.principal, task_ref)

    # -- input requests ------------------------------------------------------------------------
    async def pending_inputs(self) -> list[InputRequest]:
        """This run's unanswered input requests (its tasks', then its calls' before any task),
        oldest first: answer each with ``accept`` / ``decline`` / ``cancel`` / ``respond``."""
        return await self._owner.pending_inputs(self.principal, self.ref)

    def input_request(self, event: ev.InputRequiredEvent) -> InputRequest:
        """The typed request an input-required event of this run announces."""
        if event.run_ref != self.ref:
            raise NotFound("input request", event.input_ref)
        return self._owner.input_request(self.principal, event)

    async def answer(self, owner_ref: str, input_ref: str, response: Any) -> AnswerReceipt:
        """Send a raw answer (the method's own result shape, unchecked) to an input request of
        this run: of a task (``owner_ref``: its ``tk_…``) or of a call waiting for input before
        any task (MRTR: its ``op_…``). Prefer the typed request's ``accept`` / ``decline`` /
        ``cancel``. Recorded first, once per request, then sent; the receipt says whether it
        was delivered, queued for redelivery, or found the task lost."""
        if is_call_ref(owner_ref):
            await self._owned_call(owner_ref)
        else:
            await self.task(owner_ref)
        return await self._owner._answer_input(self.principal, owner_ref, input_ref, response)

    # -- events --------------------------------------------------------------------------------
    def subscribe(self, *, after_seq: int = 0) -> AsyncIterator[ev.BridgeEvent]:
        """The run's events after ``after_seq``, in order, then live. Reconnect with the last
        ``seq`` you saw: nothing is missed and nothing is seen twice."""
        return self._owner._subscribe(self.principal, self.ref, after_seq=after_seq)

    # -- agent state ---------------------------------------------------------------------------
    async def save_agent_state(
        self, name: str, state: Any, *, expected_version: int | None = None
    ) -> int:
        """Durably store ``state`` (a JSON value) as ``name`` beside this run; the new version.
        ``expected_version``: the version you loaded (0: none), refused if another writer saved
        since."""
        return await self._owner._save_agent_state(
            self.principal, self.ref, name, state, expected_version=expected_version
        )

    async def agent_state(self, name: str) -> AgentStateView | None:
        """The state saved as ``name`` beside this run (None: never saved)."""
        return await self._owner._agent_state(self.principal, self.ref, name)

    async def _owned_call(self, op_ref: str) -> None:
        dispatch = await self._owner._get_dispatch(self.principal, op_ref)
        if dispatch.run_ref != self.ref:
            raise NotFound("call", op_ref)
