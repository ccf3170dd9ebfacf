"""A run handle: one principal's outer run, bound once, with every step taken inside it.

    run = await bridge.register_served_run("acme", response_id=..., session_id=..., harness_id=...)
    step = await run.call_tool("reports", "generate_report", {"quarter": "Q3"})
    async for event in run.subscribe(): ...

Get one from :meth:`Bridge.register_served_run <bridge.Bridge.register_served_run>`
(a response the harness serves), :meth:`Bridge.run <bridge.Bridge.run>` (a run already
recorded, e.g. after a restart) or :meth:`Bridge.run_of <bridge.Bridge.run_of>` (the run
of a task or call reference). A handle holds nothing of its own beyond the two names: it is
cheap to make, and works while the bridge that made it is open.

A task, input or call named to a handle must belong to its run: anything else is
:class:`~bridge.errors.NotFound`, as another principal's records are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from opentelemetry import context as otel_context

from bridge import events as ev
from bridge._errors import InputAlreadyAnswered, NotFound, TaskWasLost, UnknownInputKey
from bridge._ids import is_call_ref
from bridge._ledger.agent_states import AgentStateView
from bridge._ledger.reads.views import CallView, RunView, TaskView
from bridge._ledger.store import TenantLedger
from bridge._lifecycle import Admission, CallState, OuterStatus
from bridge._outcomes import (
    CallOutcome,
    InputPending,
    InputRequest,
    TaskHandle,
)
from bridge._policies import WaitMode
from bridge._runtime import reads
from bridge._runtime.reads import BridgeServices
from bridge._runtime.step_results import (
    RecoverableFailure,
    TaskPending,
    TaskSettled,
)
from bridge._runtime.waits import until_answered, until_closed


class Run:
    """One outer run of one principal (``ref``: the bridge's ``run_…`` reference)."""

    __slots__ = ("_services", "_tenant", "principal", "ref")

    def __init__(self, services: BridgeServices, principal: str, ref: str) -> None:
        self._services = services
        self._tenant: TenantLedger = services.ledger.for_principal(principal)
        self.principal = principal
        self.ref = ref

    def __repr__(self) -> str:
        return f"Run(principal={self.principal!r}, ref={self.ref!r})"

    # -- the outer response ------------------------------------------------------------------
    async def view(self) -> RunView:
        """The run as recorded now: its UHP ids, status, stream position and event count."""
        return await self._services.db(self._tenant.reads.get_run, self.ref)

    async def record_status(self, status: OuterStatus, *, error: Any = None) -> None:
        """The harness reports its own response's status (a served run). Inner tasks are not
        touched, except as the outer-cancel / outer-end policies say."""
        services = self._services
        decision = await services.db(self._tenant.runs.observe_outer, self.ref, status, error=error)
        if decision.records_status and status.is_terminal:
            services.spans.end(self.ref, status)
            await services.outer.apply_policies(self.principal, self.ref, status)

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
        on_task: Callable[[TaskView], Awaitable[None]] | None = None,
    ) -> CallOutcome:
        """One bridged MCP tool call in this run, waited for as the policy (or ``wait``) says.

        With an ``operation_id`` the call is idempotent: calling again with the same id
        reports what the first call recorded and sends nothing (see :meth:`operation`); the
        outcome's ``replayed`` says so. ``on_task`` is awaited with the task once the call has
        become one (recorded and watched), before any wait: the task's reference while this
        call still waits."""
        services, principal, tenant = self._services, self.principal, self._tenant
        policy = services.policies().for_tool(server, tool)
        mode = wait or policy.wait
        parent = await services.spans.context(principal, self.ref)
        token = otel_context.attach(parent) if parent is not None else None
        try:
            outcome = await services.requester.call_tool(
                principal,
                self.ref,
                server,
                tool,
                arguments,
                operation_id=operation_id,
                unknown_outcomes=policy.unknown_outcomes,
            )
            while isinstance(outcome, InputPending) and mode is WaitMode.ASK:
                # MRTR: pause for the host's answers like a task's input; then what the
                # answered leg returned, read back (the operation is replayed, never re-sent).
                notifier = services.waker()
                op_id = await until_answered(
                    notifier, services.db, tenant, self.ref, outcome.op_ref
                )
                outcome = await services.requester.call_tool(
                    principal, self.ref, server, tool, arguments, operation_id=op_id
                )
        finally:
            if token is not None:
                otel_context.detach(token)
        if not isinstance(outcome, TaskHandle):
            return outcome
        task, op_ref, replayed = outcome.task, outcome.op_ref, outcome.replayed
        if on_task is not None:
            await on_task(task)
        if not task.is_open:
            return TaskSettled(op_ref, task, replayed)
        if mode is WaitMode.DETACH:
            return TaskPending(op_ref, task, replayed)
        if mode is WaitMode.FAIL_RECOVERABLE:
            reason = "the call became a task and the policy does not wait for tasks"
            await services.db(tenant.tasks.record_step_failure, task.ref, reason)
            return RecoverableFailure(op_ref, task, reason, replayed)
        deadline = wait_deadline_s if wait_deadline_s is not None else policy.wait_deadline_s
        ask = mode is WaitMode.ASK
        waited = await until_closed(
            services.waker(), services.db, tenant, op_ref, task, deadline, ask
        )
        return replace(waited, replayed=replayed)

    async def operation(self, operation_id: str) -> CallView | None:
        """The call with this operation id in this run, with its task if it became one (None:
        no such call). Reading it sends nothing; calling :meth:`call_tool` again with the id
        replays it."""
        db = self._services.db
        dispatch = await db(self._tenant.reads.find_dispatch, operation_id)
        if dispatch is None or dispatch.run_ref != self.ref:
            return None
        task = None
        if dispatch.task_ref is not None:
            task = await db(self._tenant.reads.get_task, dispatch.task_ref)
        return replace(dispatch, task=task)

    async def resolve_unknown_outcome(
        self, op_ref: str, admission: Admission, *, by: str = "host"
    ) -> None:
        """Say whether a call of this run whose outcome is unknown was admitted by its server
        (recorded once, ``call.admission_checked`` by ``host``, naming ``by``: who gave the
        verdict; see :mod:`bridge._mcp.calls.admission`)."""
        await self._owned_call(op_ref)
        requester = self._services.requester
        await requester.resolve_unknown_outcome(self.principal, op_ref, admission, by)

    async def acknowledge(self, ref: str, *, by: str, note: str = "") -> None:
        """Acknowledge a lost task of this run (``tk_…``) or an anomaly on it (``run_…:<seq>``,
        as ``Bridge.attention`` names it): it leaves the attention list; nothing else changes
        (``operator.acknowledged``, naming ``by``)."""
        if not ref.startswith(self.ref + ":"):
            await self.task(ref)
        await self._services.db(self._tenant.operator.acknowledge, ref, by, note)

    async def close(self, status: OuterStatus, *, reason: str, by: str) -> None:
        """End this served run, still ``in_progress``, with a terminal ``status``: for a run
        whose harness is gone (an orphaned run). Recorded as ``outer.closed_by_operator`` with
        ``reason`` and ``by``; its inner tasks are left as they are, open ones still watched."""
        await self._services.db(self._tenant.operator.close_run, self.ref, status, reason, by)

    # -- tasks ---------------------------------------------------------------------------------
    async def task(self, task_ref: str) -> TaskView:
        """One task handle of this run."""
        task = await self._services.db(self._tenant.reads.get_task, task_ref)
        if task.run_ref != self.ref:
            raise NotFound("task", task_ref)
        return task

    async def tasks(self, *, open_only: bool = False) -> list[TaskView]:
        """This run's task handles, oldest first; ``open_only``: those still watched."""
        reads = self._tenant.reads
        return await self._services.db(reads.list_tasks, run_ref=self.ref, open_only=open_only)

    async def wait_for(self, task_refs: Sequence[str], timeout: float) -> list[TaskView]:
        """Until every task is settled — terminal, or lost (lost counts as final) — then their
        views in the order asked. Woken by commits on this run, this process's or another's
        (no polling). Raises :class:`~bridge.errors.WaitTimedOut` after ``timeout`` seconds;
        the tasks go on being watched."""
        for task_ref in task_refs:
            await self.task(task_ref)
        return await reads.wait_for(self._services, self.principal, task_refs, timeout)

    async def poll(self, task_ref: str) -> TaskView:
        """Ask the server for a task of this run now (``tasks/get``), record what it says, and
        return the task as recorded. For a host whose own durable engine schedules the polls
        (:mod:`bridge.integrations.dbos`): the task leaves this bridge's poll scheduler, and
        the next poll is the caller's. Answers recorded but not yet delivered are sent first.
        A settled task is read, not polled."""
        await self.task(task_ref)
        task, _ = await self._services.requester.poll_now(self.principal, task_ref)
        return task

    async def cancel_task(self, task_ref: str) -> bool:
        """Ask the server to cancel a task of this run (``tasks/cancel``, recorded first as the
        host's intent). True when the server acknowledged it; False when the task had already
        ended or the request was refused or could not be sent (then resent before the next
        poll). An acknowledgement is not a stop: the task's status says that."""
        await self.task(task_ref)
        return await self._services.requester.cancel_task(self.principal, task_ref, "host")

    async def detach(self, task_ref: str) -> bool:
        """Stop watching a task of this run without cancelling it."""
        await self.task(task_ref)
        return await self._services.requester.detach_task(self.principal, task_ref, "host")

    # -- input requests ------------------------------------------------------------------------
    async def pending_inputs(self) -> list[InputRequest]:
        """This run's unanswered input requests (its tasks', then its calls' before any task),
        oldest first: answer each with ``accept`` / ``decline`` / ``dismiss`` / ``respond``."""
        return await reads.pending_inputs(self._services, self.principal, self.ref)

    async def pending_input(self, owner_ref: str, input_ref: str) -> InputRequest:
        """The typed request ``input_ref`` of a task (``tk_…``) or call (MRTR: ``op_…``) of this
        run, still waiting for an answer. ``NotFound``: not this run's task or call;
        ``UnknownInputKey``: never asked; ``TaskWasLost``: its task was lost (the request was
        closed with it); ``InputAlreadyAnswered``: answered (or declined)."""
        db, tenant = self._services.db, self._tenant
        task: TaskView | None = None
        if is_call_ref(owner_ref):
            await self._owned_call(owner_ref)
            asked = [v.ref for v in await db(tenant.rounds.call_inputs, owner_ref)]
        else:
            task = await self.task(owner_ref)
            asked = [v.ref for v in await db(tenant.reads.input_requests, owner_ref)]
        if input_ref not in asked:
            raise UnknownInputKey(f"{owner_ref} never asked for input {input_ref}")
        if task is not None and task.lost_reason is not None and task.terminal_at_ms is None:
            raise TaskWasLost(
                f"task {owner_ref} was lost ({task.lost_reason.value}): its input request "
                f"{input_ref} was closed with it; nothing was sent"
            )
        for request in await self.pending_inputs():
            if request.input_ref == input_ref and owner_ref in (request.task_ref, request.op_ref):
                return request
        raise InputAlreadyAnswered(f"input request {input_ref} is not waiting for an answer")

    def input_request(self, event: ev.InputRequiredEvent) -> InputRequest:
        """The typed request an input-required event of this run announces."""
        if event.run_ref != self.ref:
            raise NotFound("input request", event.input_ref)
        return reads.input_request(self._services, self.principal, event)

    # -- events --------------------------------------------------------------------------------
    async def subscribe(
        self, *, after_seq: int = 0, until_idle: bool = False
    ) -> AsyncIterator[ev.BridgeEvent]:
        """The run's events after ``after_seq``, in order, then live. Reconnect with the last
        ``seq`` you saw: nothing is missed and nothing is seen twice. ``until_idle``: end once
        every event is seen and the run waits on nothing (see :meth:`is_idle`): a loop over
        a run's calls then ends by itself, whatever they came to (a result, a refusal, an
        unknown outcome, a task that settled or was detached)."""
        services = self._services
        notifier = services.waker()
        last = after_seq
        limit = 500
        while True:
            with notifier.watch(self.principal, self.ref) as change:  # armed, then read
                # Idle read first: every event up to that point is then in the batch below.
                idle = until_idle and await self.is_idle()
                batch = await services.db(
                    self._tenant.reads.events, self.ref, after_seq=last, limit=limit
                )
                for event in batch:
                    last = event.seq
                    yield event
                # A short batch was all there was when read; the watch was armed before the
                # read, so a later commit has set it: wait here instead of reading again.
                if len(batch) < limit:
                    if idle:
                        return
                    await change.wait(None)  # woken by a commit on the run (or the backstop)

    async def is_idle(self) -> bool:
        """Whether the run waits on nothing: no call being sent or waiting for input, no task
        still watched, no input request unanswered. An unknown outcome waits on nobody but
        you (``resolve_unknown_outcome``), so it does not keep a run busy."""
        tasks, calls, unanswered = await self._services.db(self._tenant.reads.run_work, self.ref)
        busy = (CallState.PENDING, CallState.SENT, CallState.INPUT_REQUIRED)
        open_task = any(t.is_open for t in tasks)
        return not (unanswered or open_task or any(c.state in busy for c in calls))

    # -- agent state ---------------------------------------------------------------------------
    async def save_agent_state(
        self, name: str, state: Any, *, expected_version: int | None = None
    ) -> int:
        """Durably store ``state`` (a JSON value: message history, tool-call ↔ task-ref map,
        a serialised run state) as ``name`` beside this run; returns the new version.

        ``expected_version`` is the version you loaded (``0`` when there was none): if another
        writer saved since, :class:`~bridge.errors.InvalidTransition` is raised and nothing is
        written. States over 4 MiB (:class:`~bridge.errors.AgentStateTooLarge`) or carrying a
        credential-named field are refused: the ledger never stores bearer tokens.
        """
        save = self._tenant.agent_states.save_agent_state
        version: int = await self._services.db(
            save, self.ref, name, state, expected_version=expected_version
        )
        return version

    async def agent_state(self, name: str) -> AgentStateView | None:
        """The state saved as ``name`` beside this run (None: never saved)."""
        view: AgentStateView | None = await self._services.db(
            self._tenant.agent_states.agent_state, self.ref, name
        )
        return view

    async def _owned_call(self, op_ref: str) -> None:
        dispatch = await self._services.db(self._tenant.reads.get_dispatch, op_ref)
        if dispatch.run_ref != self.ref:
            raise NotFound("call", op_ref)
