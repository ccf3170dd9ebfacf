"""A bridged tool call inside a ``@DBOS.workflow``: one step sends it and polls its task until
its state changes; then, while it is open, the workflow sleeps durably (``DBOS.sleep``: the
server's ``pollIntervalMs``, or the backoff after a failed poll) and polls again in a step,
until the task is settled; the outcome is read from the ledger.

Which record is the truth: the bridge's ledger. The workflow's steps hold only what it needs
to resume (the run, call and task references, the statuses and input references the ledger
recorded) and each is taken after the ledger's commit. The outcome itself is not copied into
a step: it is read from the ledger once the call is settled, and a settled call never changes
there, so every replay of the workflow reads the same outcome.
"""

from __future__ import annotations

from typing import Any

from dbos import DBOS, error

from bridge._errors import BridgeError
from bridge._lifecycle import CallState
from bridge._outcomes import CallOutcome, InlineResult, RejectedCall, UnknownOutcome
from bridge._policies import OnWorkflowCancel
from bridge._runtime.step_results import TaskSettled
from bridge.integrations.dbos import _cancel, _steps
from bridge.integrations.dbos._attach import attached

# How DBOS stops a cancelled workflow: it refuses its next step (cancelled), or a running
# step's checkpoint (no longer owned), or stops its poll step (cancelled).
_STOPPED = (error.DBOSWorkflowCancelledError, error.DBOSWorkflowConflictIDError)


def _workflow_id() -> str:
    workflow_id = DBOS.workflow_id
    if workflow_id is None:
        raise BridgeError("bridge.integrations.dbos: call this inside a @DBOS.workflow")
    return workflow_id


async def workflow_run() -> str:
    """The ``run_…`` reference of this workflow's bridge run (registered by a step,
    idempotent on the workflow's id: the run its calls are recorded under)."""
    return await _steps.open_run(_workflow_id())


async def call_tool(
    server: str,
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    run_ref: str | None = None,
    on_cancel: OnWorkflowCancel = OnWorkflowCancel.LEAVE,
) -> CallOutcome:
    """Call ``tool`` on ``server`` through the attached bridge, durably, from a workflow.

    Returns the bridge's own outcome types: :class:`~bridge.TaskSettled` (ended, or lost:
    ``.lost``), :class:`~bridge.InlineResult`, :class:`~bridge.RejectedCall`, or
    :class:`~bridge.UnknownOutcome` (the request may have reached the server and its reply
    never came back: never sent a second time). While the task is ``input_required`` the
    workflow waits, polling at the server's interval, for an answer given through the
    bridge (``Bridge.pending_inputs``, ``bridge answer``, the console).

    A workflow cancelled (``DBOS.cancel_workflow``) while its task is open sends
    ``tasks/cancel`` only with ``on_cancel=OnWorkflowCancel.CANCEL_TASK``; either way the
    handle goes back to the bridge's own poll scheduler, which records how the task ends."""
    workflow_id = _workflow_id()
    try:
        sent = await _steps.send(run_ref, server, tool, dict(arguments or {}))
    except _STOPPED:
        # The step ran, DBOS refused its checkpoint: its output is still this process's.
        await _stopped(workflow_id, _steps.take_sent(workflow_id), on_cancel)
        raise
    finally:
        _steps.take_sent(workflow_id)  # kept no longer than the step's return
    observed = sent["task"]
    try:
        if "asking" in sent:
            observed = await _answered(sent)
        while observed is not None and observed["open"]:
            await DBOS.sleep_async(_wait_ms(observed) / 1000)
            observed = await _steps.poll(sent["run_ref"], observed)
    except _STOPPED:
        _steps.forget(observed)
        await _stopped(workflow_id, sent, on_cancel)
        raise
    return await _settled(sent["run_ref"], sent["operation_id"])


def _wait_ms(observed: dict[str, Any]) -> int:
    """The durable sleep before the next poll step, as the last step set it (the rest of the
    jittered interval since its last poll, or the backoff); a checkpoint taken before steps
    set it: the interval since that poll, without jitter."""
    if "wait_ms" in observed:
        return int(observed["wait_ms"])
    backoff = observed["carried"]["backoff_ms"]
    delay_ms = attached().delay_ms(observed["poll_interval_ms"], backoff)
    return delay_ms if backoff is not None else max(0, delay_ms - observed["since_poll_ms"])


async def _answered(sent: dict[str, Any]) -> dict[str, Any] | None:
    """MRTR: the call asked for input before any task. The workflow waits, with durable
    sleeps, until the input is answered through the bridge (API, CLI, console: recorded once,
    and the call sent again by the bridge that took the answer); then the task that call
    made, first observed, or None (the call settled without one)."""
    asked: dict[str, Any] = {"moved_on": False}
    while not asked["moved_on"]:
        await DBOS.sleep_async(attached().delay_ms(None, None) / 1000)
        asked = await _steps.call_input(sent["run_ref"], sent["operation_id"])
    task: dict[str, Any] | None = asked["task"]
    return task


async def _stopped(
    workflow_id: str, sent: dict[str, Any] | None, on_cancel: OnWorkflowCancel
) -> None:
    """The workflow's execution stopped here. Not owned may also mean resumed elsewhere: the
    policy applies only to a workflow DBOS records as cancelled."""
    if sent is not None and await _cancel.is_cancelled(workflow_id):
        await _cancel.workflow_cancelled(sent["run_ref"], sent["operation_id"], on_cancel)


async def _settled(run_ref: str, operation_id: str) -> CallOutcome:
    """The settled call as the ledger records it (immutable from here on)."""
    record = await attached().run(run_ref).operation(operation_id)
    if record is None:
        raise BridgeError(f"operation {operation_id!r} is not recorded in run {run_ref}")
    dispatch, task = record, record.task
    if task is not None:
        return TaskSettled(dispatch.ref, task)
    if dispatch.state is CallState.RESULT:
        result = dispatch.result
        if isinstance(result, dict) and set(result) == {"error"}:
            return RejectedCall(dispatch.ref, result["error"])
        return InlineResult(dispatch.ref, result, truncated=dispatch.result_truncated)
    if dispatch.state is CallState.UNKNOWN:
        return UnknownOutcome(dispatch.ref, dispatch.unknown_reason or "unknown")
    raise BridgeError(f"call {dispatch.ref} is {dispatch.state.value}, not settled")
