"""The workflow side: :func:`call_tool`, one bridged MCP call awaited inside a workflow.

Deterministic: it only runs activities, keeps its state on the workflow instance and answers
the ``bridge.answer`` update. The handle the start activity returns is in workflow history
before anything waits on it, so a replay (or a worker that takes over) resumes the same handle;
the operation id is made from the workflow id and the call's name, so a retried or reset start
replays the recorded dispatch instead of sending again.
"""

# No `from __future__ import annotations`: every workflow run registers the update and query
# handlers below, and Temporal reads their type hints each time; as strings they would be
# evaluated (compiled) again inside the sandbox on every run.
import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from bridge._answers import build_answer
    from bridge._errors import InvalidAnswer
    from bridge._policies import OnWorkflowCancel  # one policy shared with the DBOS integration

from bridge.integrations.temporal import _wire as wire
from bridge.integrations.temporal._values import (
    ANSWER_INPUT,
    ANSWER_UPDATE,
    CANCEL_TASK,
    PENDING_INPUTS_QUERY,
    START_CALL,
    WATCH_CALL,
    WATCH_TASK,
    AnswerRequest,
    CallOptions,
    CallWatchRequest,
    InputAnswer,
    PendingInput,
    Started,
    TaskRefs,
    ToolCall,
    ToolOutcome,
    WatchRequest,
)

_STATE_ATTRIBUTE = "_bridge_temporal_calls"
_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=10))


@dataclass
class _Waiting:
    call: ToolCall
    handle: TaskRefs | None  # None: an input of the call before any task (MRTR)
    request: PendingInput
    options: CallOptions


@dataclass
class _CallsState:
    """What the bridged calls of one workflow run share: names used, inputs waiting."""

    names: set[str] = field(default_factory=set)
    counter: int = 0
    waiting: dict[str, _Waiting] = field(default_factory=dict)


def _state() -> _CallsState:
    instance = workflow.instance()
    state: _CallsState | None = getattr(instance, _STATE_ATTRIBUTE, None)
    if state is None:
        state = _CallsState()
        setattr(instance, _STATE_ATTRIBUTE, state)
        workflow.set_update_handler(ANSWER_UPDATE, _answer, validator=_validate)
        workflow.set_query_handler(PENDING_INPUTS_QUERY, _pending)
    return state


async def call_tool(
    server: str,
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    name: str | None = None,
    on_cancel: OnWorkflowCancel = OnWorkflowCancel.LEAVE,
    options: CallOptions | None = None,
) -> ToolOutcome:
    """Call ``tool`` on ``server`` through the bridge and wait, durably, until it settles.

    Call it from workflow code only. ``name`` (unique in the workflow; default ``call-<n>``
    in call order) makes the operation id ``<workflow id>:<name>``. An input the task asks
    for waits for the ``bridge.answer`` update (checked against the request's schema by its
    validator) or for an answer given through the bridge. A workflow cancelled while waiting
    sends ``tasks/cancel`` only with ``on_cancel=OnWorkflowCancel.CANCEL_TASK``.
    """
    state = _state()
    opts = options or CallOptions()
    if name is None:
        state.counter += 1
        name = f"call-{state.counter}"
    if name in state.names:
        raise ApplicationError(f"bridged call name {name!r} used twice", non_retryable=True)
    state.names.add(name)
    workflow_id = workflow.info().workflow_id
    call = ToolCall(workflow_id, server, tool, dict(arguments or {}), f"{workflow_id}:{name}")
    try:
        started = wire.started_of(await _start(call, opts))
        while started.asked:
            # The server asked before creating anything (MRTR): the same wait as a task's
            # input; once answered the bridge sends the call again, and this is its outcome.
            started = await _await_round(state, call, started.asked, opts)
        if started.outcome is not None:
            return started.outcome
        assert started.handle is not None
        return await _watch(state, call, started.handle, opts)
    except (asyncio.CancelledError, ActivityError) as stopped:
        # The workflow's cancellation reaches here as itself, or as an activity's
        # cancellation; any other activity failure is not a cancellation.
        if isinstance(stopped, ActivityError) and not isinstance(stopped.cause, CancelledError):
            raise
        if on_cancel is OnWorkflowCancel.CANCEL_TASK:
            # By operation id: the cancellation may have come before the handle reached here.
            await workflow.execute_activity(
                CANCEL_TASK,
                wire.call_json(call),
                result_type=bool,
                start_to_close_timeout=timedelta(seconds=opts.answer_timeout_s),
                retry_policy=_RETRY,
                task_queue=opts.task_queue,
            )
        raise


async def _start(call: ToolCall, opts: CallOptions) -> dict[str, Any]:
    timeout = timedelta(seconds=opts.start_timeout_s)
    if opts.task_queue is None:
        # A local activity: no activity task through the Temporal server and no workflow task
        # of its own; its result is recorded (a marker) in the same workflow task completion
        # that schedules the watch, so the handle is in history before anything waits on it.
        started: dict[str, Any] = await workflow.execute_local_activity(
            START_CALL,
            wire.call_json(call),
            result_type=dict,
            start_to_close_timeout=timeout,
            retry_policy=_RETRY,
        )
        return started
    started = await workflow.execute_activity(
        START_CALL,
        wire.call_json(call),
        result_type=dict,
        start_to_close_timeout=timeout,
        retry_policy=_RETRY,
        task_queue=opts.task_queue,
    )
    return started


async def _watched(activity: str, argument: dict[str, Any], opts: CallOptions) -> dict[str, Any]:
    """What a heartbeating watch (of a task, or of a call before any task) saw."""
    seen: dict[str, Any] = await workflow.execute_activity(
        activity,
        argument,
        result_type=dict,
        start_to_close_timeout=timedelta(seconds=opts.watch_timeout_s),
        heartbeat_timeout=timedelta(seconds=opts.heartbeat_timeout_s),
        retry_policy=_RETRY,
        task_queue=opts.task_queue,
    )
    return seen


async def _watch(
    state: _CallsState, call: ToolCall, handle: TaskRefs, opts: CallOptions
) -> ToolOutcome:
    waiting: list[str] = []
    seen: list[str] = []
    while True:
        request = WatchRequest(call, handle, list(waiting), list(seen))
        seen_now = wire.observation_of(await _watched(WATCH_TASK, wire.watch_json(request), opts))
        if seen_now.settled is not None:
            for ref in waiting:
                state.waiting.pop(ref, None)
            return seen_now.settled
        if seen_now.asked is not None:
            ref = seen_now.asked.input_ref
            waiting.append(ref)
            seen.append(ref)
            state.waiting[ref] = _Waiting(call, handle, seen_now.asked, opts)
        if seen_now.answered is not None:
            waiting.remove(seen_now.answered)
            state.waiting.pop(seen_now.answered, None)


async def _await_round(
    state: _CallsState, call: ToolCall, asked: list[PendingInput], opts: CallOptions
) -> Started:
    op_ref = asked[0].op_ref
    assert op_ref is not None
    waiting = [p.input_ref for p in asked]
    for pending in asked:
        state.waiting[pending.input_ref] = _Waiting(call, None, pending, opts)
    try:
        while True:
            request = CallWatchRequest(call, op_ref, [p.input_ref for p in asked], list(waiting))
            seen = wire.call_observation_of(
                await _watched(WATCH_CALL, wire.call_watch_json(request), opts)
            )
            if seen.started is not None:
                return seen.started
            if seen.answered is not None:
                waiting.remove(seen.answered)
                state.waiting.pop(seen.answered, None)
    finally:
        for ref in waiting:
            state.waiting.pop(ref, None)


def _validate(answer: InputAnswer) -> None:
    """Refuse (before anything reaches history) an answer to no waiting input, or one that does
    not fit the request's schema: every problem named."""
    waiting = _state().waiting.get(answer.input_ref)
    if waiting is None:
        raise ValueError(f"no input {answer.input_ref!r} is waiting for an answer")
    try:
        _build(waiting.request, answer)
    except InvalidAnswer as exc:
        raise ValueError(str(exc)) from None


async def _answer(answer: InputAnswer) -> str:
    """Record and send the answer through the bridge; the delivery (``already_answered`` when
    it was answered through the bridge first: one answer per input)."""
    waiting = _state().waiting.get(answer.input_ref)
    if waiting is None:
        return "already_answered"
    built = _build(waiting.request, answer)
    request = AnswerRequest(
        waiting.call, waiting.handle, answer.input_ref, built, waiting.request.op_ref
    )
    delivery: str = await workflow.execute_activity(
        ANSWER_INPUT,
        wire.answer_json(request),
        result_type=str,
        start_to_close_timeout=timedelta(seconds=waiting.options.answer_timeout_s),
        retry_policy=_RETRY,
        task_queue=waiting.options.task_queue,
    )
    return delivery


def _build(request: PendingInput, answer: InputAnswer) -> dict[str, Any]:
    # The bridge's one answer check (a pure function of the schema and the answer): run outside
    # the sandbox's restrictions, with what it imports on first use passed through.
    with workflow.unsafe.imports_passed_through(), workflow.unsafe.sandbox_unrestricted():
        built: dict[str, Any] = build_answer(
            answer.input_ref,
            request.requested_schema,
            answer.action,
            texts=answer.texts,
            content=answer.content,
        )
    return built


def _pending() -> list[PendingInput]:
    return [w.request for w in _state().waiting.values()]
