"""A call that asks for input before any task exists (MRTR), as the worker watches it.

The call is recorded ``input_required`` with its round's inputs; the workflow waits until each
is answered (by its ``bridge.answer`` update or through the bridge) and the bridge has sent the
call again with the answers. What the call then came to is read back by replaying its operation
id, never by sending: so the watch reads the call's state first and replays only once nothing
is in flight (a replay of a call still being sent would settle it as an unknown outcome).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bridge._lifecycle import CallState
from bridge._outcomes import InputRequest
from bridge._run import Run
from bridge.integrations.temporal._values import (
    CallObservation,
    CallWatchRequest,
    PendingInput,
    Started,
)

# Replays the call by its operation id (sends nothing) and reads what it came to.
Replay = Callable[[], Awaitable[Started]]


def asked_input(request: InputRequest) -> PendingInput:
    """An input of a call's round, as workflow history and the pending-inputs query hold it."""
    return PendingInput(
        request.input_ref,
        None,
        request.method,
        request.message,
        request.requested_schema,
        request.op_ref,
    )


async def watch_rounds(run: Run, request: CallWatchRequest, replay: Replay) -> CallObservation:
    """Until an input the workflow waits on is answered, or the call moved past its round."""
    async for event in run.subscribe():
        # Every change to the call (an answer, the next round, a task, a result) is an event
        # naming it; the state is read afresh, so a change made before the watch began counts.
        if getattr(event, "op_ref", None) != request.op_ref:
            continue
        seen = await _now(run, request, replay)
        if seen is not None:
            return seen
    raise AssertionError("a run's event stream does not end")  # pragma: no cover


async def _now(run: Run, request: CallWatchRequest, replay: Replay) -> CallObservation | None:
    view = await run.operation(request.call.operation_id)
    if view is None or view.state in (CallState.PENDING, CallState.SENT):
        return None  # the answered call is being sent again: its outcome comes as an event
    if view.state is not CallState.INPUT_REQUIRED:
        return CallObservation(started=await replay())
    pending = {r.input_ref for r in await run.pending_inputs() if r.op_ref == request.op_ref}
    if pending and not pending & set(request.asked):
        return CallObservation(started=await replay())  # a new round asks again
    answered = [ref for ref in request.waiting if ref not in pending]
    return CallObservation(answered=answered[0]) if answered else None
