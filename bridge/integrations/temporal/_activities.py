"""The bridge's Temporal activities: start a call, watch its handle, answer, cancel.

They run in a worker that holds one open :class:`~bridge.Bridge` (its ledger and MCP
connections). Every activity is safe to run again: a call is keyed by its operation id, so a
retried start (or a watch on another worker) replays what the first attempt recorded and sends
nothing; an attempt that died after sending is settled as an unknown outcome by the bridge's
recovery and reported as such, never sent a second time.

Why a heartbeating watch rather than one durable timer per poll: the bridge's one poll
scheduler already honours each task's ``pollIntervalMs``, its TTL, lost handles and push
streams, for all the worker's handles in one loop; a timer plus an activity per poll would put
two history events and a round trip through the Temporal server on every ``tasks/get``.
The watch reports only what the workflow must decide about (settled, asked, answered), and its
heartbeat lets Temporal move it to another worker when this one dies.
"""

from __future__ import annotations

from typing import Any

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError

from bridge import events as ev
from bridge._errors import InputAlreadyAnswered
from bridge._facade import Bridge
from bridge._ledger.reads.views import TaskView
from bridge._lifecycle import TaskStatus
from bridge._outcomes import CallOutcome, InlineResult, InputPending, RejectedCall, UnknownOutcome
from bridge._policies import WaitMode
from bridge._run import Run
from bridge._runtime.step_results import TaskPending, TaskSettled
from bridge.integrations.temporal import _wire as wire
from bridge.integrations.temporal._rounds import asked_input, watch_rounds
from bridge.integrations.temporal._values import (
    ANSWER_INPUT,
    CANCEL_TASK,
    START_CALL,
    WATCH_CALL,
    WATCH_TASK,
    CallObservation,
    Observation,
    OutcomeKind,
    PendingInput,
    Started,
    TaskRefs,
    ToolCall,
    ToolOutcome,
    WatchRequest,
)
from bridge.integrations.temporal._wire import Json

# The bridge run a workflow's calls are recorded under is named after the workflow id.
HARNESS = "temporal"


class BridgeActivities:
    """The activities of one principal on one open bridge; register ``activities()`` with a
    worker: ``Worker(client, task_queue=..., workflows=[...], activities=acts.activities())``.
    """

    def __init__(self, bridge: Bridge, principal: str) -> None:
        if principal not in bridge.principals:
            raise ValueError(f"principal {principal!r} is not in this bridge's scope")
        self._bridge = bridge
        self.principal = principal

    def activities(self) -> list[Any]:
        """The five activities, for ``Worker(activities=...)``."""
        return [
            self.start_call,
            self.watch_task,
            self.watch_call,
            self.answer_input,
            self.cancel_task,
        ]

    async def run_of(self, workflow_id: str) -> Run:
        """The bridge run a workflow's calls are recorded under (``bridge runs`` lists it with
        response id ``temporal:<workflow id>``); registered on first use, the same one after."""
        # Registering the same response id again returns the run already recorded.
        return await self._bridge.register_served_run(
            self.principal,
            response_id=f"temporal:{workflow_id}",
            session_id=None,
            harness_id=None,
            harness=HARNESS,
        )

    @activity.defn(name=START_CALL)
    async def start_call(self, data: Json) -> Json:
        """Send the call (write-ahead), or replay what an earlier attempt recorded: a
        :class:`Started` (as JSON, see ``_wire``) for a :class:`ToolCall`."""
        call = wire.call_of(data)
        run = await self.run_of(call.workflow_id)
        return wire.started_json(_started(run, await _call(run, call)))

    @activity.defn(name=WATCH_CALL)
    async def watch_call(self, data: Json) -> Json:
        """Wait, heartbeating, on a call that asked for input before any task (MRTR) until an
        input of its round is answered (the ``bridge.answer`` update, or the bridge's API, CLI
        or console) or the call moved on: a :class:`CallObservation` for a
        :class:`CallWatchRequest`."""
        request = wire.call_watch_of(data)
        run = await self.run_of(request.call.workflow_id)

        async def replay() -> Started:
            return _started(run, await _call(run, request.call))

        result: CallObservation | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(_heartbeat)
            result = await watch_rounds(run, request, replay)
            group.cancel_scope.cancel()
        assert result is not None
        return wire.call_observation_json(result)

    @activity.defn(name=WATCH_TASK)
    async def watch_task(self, data: Json) -> Json:
        """Wait, heartbeating, until the task settles, asks something new, or an input the
        workflow waits on is answered through the bridge (API, CLI, console): an
        :class:`Observation` for a :class:`WatchRequest`."""
        return wire.observation_json(await self._watch(wire.watch_of(data)))

    async def _watch(self, request: WatchRequest) -> Observation:
        run = self._bridge.run(self.principal, request.handle.run_ref)
        if not self._bridge.is_watching(request.handle.task_ref):
            # Not watched here (the worker that started it died, or the task settled): a replay
            # watches it again if it is open, and sends nothing. Asking first saves the
            # replay's ledger write on the usual path, where this process started the call.
            replayed = await _call(run, request.call)
            if isinstance(replayed, TaskSettled):
                return Observation(settled=_task_outcome(replayed.op_ref, replayed.task))
        result: Observation | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(_heartbeat)
            result = await _observe(run, request)
            group.cancel_scope.cancel()
        assert result is not None
        return result

    @activity.defn(name=ANSWER_INPUT)
    async def answer_input(self, data: Json) -> str:
        """Record and send an answer (an :class:`AnswerRequest`) checked by the update's
        validator; the delivery, or ``already_answered`` when someone answered first (the
        ledger keeps one answer)."""
        request = wire.answer_of(data)
        handle = request.handle
        if handle is None:  # an input of the call before any task (MRTR)
            assert request.op_ref is not None
            run, owner = await self.run_of(request.call.workflow_id), request.op_ref
        else:
            run, owner = self._bridge.run(self.principal, handle.run_ref), handle.task_ref
        answer = request.answer
        try:
            asked = await run.pending_input(owner, request.input_ref)
            if answer["action"] == "accept":
                receipt = await asked.accept(answer.get("content"))
            elif answer["action"] == "decline":
                receipt = await asked.decline()
            else:
                receipt = await asked.dismiss()
        except InputAlreadyAnswered:
            return "already_answered"
        return receipt.delivery.value

    @activity.defn(name=CANCEL_TASK)
    async def cancel_task(self, data: Json) -> bool:
        """``tasks/cancel`` for the task of a call (a :class:`ToolCall`) whose workflow's
        policy says so (recorded first as intent); False when the call made no task or it has
        already ended."""
        call = wire.call_of(data)
        run = await self.run_of(call.workflow_id)
        record = await run.operation(call.operation_id)
        if record is None or record.task is None or not record.task.is_open:
            return False
        acknowledged: bool = await run.cancel_task(record.task.ref)
        return acknowledged


async def _call(run: Run, call: ToolCall) -> CallOutcome:
    return await run.call_tool(
        call.server,
        call.tool,
        call.arguments,
        operation_id=call.operation_id,
        wait=WaitMode.DETACH,
    )


def _started(run: Run, outcome: CallOutcome) -> Started:
    if isinstance(outcome, TaskPending):
        task = outcome.task
        refs = TaskRefs(run.ref, outcome.op_ref, task.ref, task.poll_interval_ms)
        return Started(handle=refs)
    if isinstance(outcome, InputPending):
        return Started(asked=[asked_input(i) for i in outcome.inputs])
    return Started(outcome=_outcome(outcome))


async def _heartbeat() -> None:
    timeout = activity.info().heartbeat_timeout
    every = timeout.total_seconds() / 3 if timeout else 5.0
    while True:
        # Sleep first: the server counts the heartbeat timeout from the activity's start, so a
        # first beat at a third of it is in time, and a watch of a short task ends before any
        # (a round trip to the Temporal server fewer). A cancellation is heard in a beat's
        # reply, and a beat at the very start would have had none to hear.
        await anyio.sleep(every)
        activity.heartbeat()


async def _observe(run: Run, request: WatchRequest) -> Observation:
    task_ref = request.handle.task_ref
    waiting, seen = set(request.waiting), set(request.seen)
    async for event in run.subscribe():
        if getattr(event, "task_ref", None) != task_ref:
            continue
        if isinstance(event, ev.TaskTerminal | ev.TaskLost):
            return Observation(
                settled=_task_outcome(request.handle.op_ref, await run.task(task_ref))
            )
        if isinstance(event, ev.TaskInputRequired) and event.input_ref not in seen:
            params = event.params
            schema = params.get("requestedSchema")
            message = params.get("message")
            asked = PendingInput(
                event.input_ref,
                task_ref,
                event.method,
                message if isinstance(message, str) else None,
                schema if isinstance(schema, dict) else None,
            )
            return Observation(asked=asked)
        answered = isinstance(event, ev.TaskInputAnswered) or (
            isinstance(event, ev.TaskInputDeclined) and event.answered
        )
        if answered and getattr(event, "input_ref", None) in waiting:
            return Observation(answered=event.input_ref)  # type: ignore[union-attr]
    raise AssertionError("a run's event stream does not end")  # pragma: no cover


def _outcome(outcome: CallOutcome) -> ToolOutcome:
    if isinstance(outcome, TaskSettled):
        return _task_outcome(outcome.op_ref, outcome.task)
    if isinstance(outcome, InlineResult):
        return _result(outcome.op_ref, None, outcome.result)
    if isinstance(outcome, RejectedCall):
        return ToolOutcome(OutcomeKind.FAILED, outcome.op_ref, detail=_error_text(outcome.error))
    if isinstance(outcome, UnknownOutcome):
        return ToolOutcome(OutcomeKind.UNKNOWN, outcome.op_ref, detail=outcome.reason)
    raise ApplicationError(f"unexpected call outcome {outcome.kind}", non_retryable=True)


def _task_outcome(op_ref: str, task: TaskView) -> ToolOutcome:
    if task.lost_reason is not None and task.terminal_at_ms is None:
        detail = task.lost_reason.value + (f": {task.lost_detail}" if task.lost_detail else "")
        return ToolOutcome(OutcomeKind.LOST, op_ref, task.ref, detail=detail)
    if task.status is TaskStatus.COMPLETED and isinstance(task.result, dict):
        return _result(op_ref, task.ref, task.result)
    if task.status is TaskStatus.CANCELLED:
        return ToolOutcome(OutcomeKind.CANCELLED, op_ref, task.ref)
    return ToolOutcome(OutcomeKind.FAILED, op_ref, task.ref, detail=_error_text(task.error))


def _result(op_ref: str, task_ref: str | None, result: Any) -> ToolOutcome:
    content = result.get("content") if isinstance(result, dict) else None
    texts = [
        item["text"]
        for item in content or []
        if isinstance(item, dict)
        and item.get("type") == "text"
        and isinstance(item.get("text"), str)
    ]
    return ToolOutcome(
        OutcomeKind.COMPLETED,
        op_ref,
        task_ref,
        is_error=bool(result.get("isError")) if isinstance(result, dict) else False,
        result=result if isinstance(result, dict) else None,
        text="".join(texts) if texts else None,
    )


def _error_text(error: Any) -> str | None:
    if isinstance(error, dict):
        message = error.get("message")
        return message if isinstance(message, str) else None
    return None
