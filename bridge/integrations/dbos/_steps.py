"""The DBOS steps of a bridged call: send it, poll its task. Each step writes the bridge's
ledger first and returns what the ledger committed (references and statuses, never a raw
task id), so a step's checkpoint is a copy of a ledger row and cannot run ahead of it.

A step re-run by DBOS (its process died before the checkpoint) is safe: the send replays the
operation id (an intent whose reply never came back becomes an unknown outcome, never a second
call) and a poll asks the server again.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import asdict
from typing import Any, cast

import anyio
from dbos import DBOS

from bridge import events as ev
from bridge._errors import BridgeError
from bridge._ledger.reads.views import TaskView
from bridge._ledger.store import wall_clock_ms
from bridge._lifecycle import CallState, TaskStatus
from bridge._mcp.polling.handle_resumption import HostPoll
from bridge._outcomes import InputPending, TaskHandle
from bridge._policies import WaitMode
from bridge._run import Run
from bridge._runtime.step_results import TaskPending, TaskSettled
from bridge.integrations.dbos._attach import Attached, attached

# What a served run registered by a workflow is recorded as (``bridge runs`` shows it).
HARNESS = "dbos"


# What each workflow's running send step returned, until the workflow has it: DBOS refuses the
# checkpoint of a step whose workflow was cancelled meanwhile, and the cancel policy still
# needs to know the call (see :func:`take_sent`).
_sent: dict[str, dict[str, Any]] = {}


def take_sent(workflow_id: str) -> dict[str, Any] | None:
    """The output of the workflow's last send step in this process, once (``None``: none)."""
    return _sent.pop(workflow_id, None)


# The task as the last poll step in this process read it from the ledger after its last poll,
# with the token of the observation (the step's output) it was read for. The next poll step of
# the workflow holding that observation starts from it, as a step's later polls start from the
# read after the poll before: a step's first poll does not wait for a ledger read among every
# other handle's (they fall due in bursts). Anything else reads the ledger: another process ran
# the last step, this one restarted, or the observation is not the one kept.
_known: dict[str, tuple[str, TaskView]] = {}


def _remember(task: TaskView, observed: dict[str, Any]) -> None:
    """Keep the task read for ``observed`` (a closed task or a wait for input is not kept:
    an input's answers and digests are read from the ledger at every poll)."""
    if not task.is_open or task.status is TaskStatus.INPUT_REQUIRED:
        _known.pop(task.ref, None)
        return
    token = secrets.token_hex(8)
    observed["read"] = token
    _known[task.ref] = (token, task)


def _recall(last: dict[str, Any]) -> TaskView | str:
    """What a poll step starts from: the task kept for ``last`` (taken: used once), else its
    reference (the ledger is read)."""
    kept = _known.pop(last["task_ref"], None)
    if kept is None:
        return str(last["task_ref"])
    token, task = kept
    if token != last.get("read") or task.status.value != last["status"]:
        return str(last["task_ref"])
    return task


def forget(observed: dict[str, Any] | None) -> None:
    """The workflow stopped holding this observation (cancelled, or gone elsewhere)."""
    if observed is not None:
        _known.pop(observed["task_ref"], None)


def operation_id(workflow_id: str, step_id: int) -> str:
    """The call's operation id: the same on every re-run of its step, in any process."""
    return f"dbos:{workflow_id}:{step_id}"


def response_id(workflow_id: str) -> str:
    """The outer response id of the run a workflow registers (one per workflow)."""
    return f"dbos-{workflow_id}"


def _context() -> tuple[str, int]:
    workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
    if workflow_id is None or step_id is None:
        raise BridgeError("bridge.integrations.dbos: call this inside a @DBOS.workflow")
    return workflow_id, step_id


async def _register(workflow_id: str) -> str:
    here = attached()
    run = await here.bridge.register_served_run(
        here.principal,
        response_id=response_id(workflow_id),
        session_id=None,
        harness_id=None,
        harness=HARNESS,
    )
    return run.ref


@DBOS.step(name="bridge.open_run")
async def open_run(workflow_id: str) -> str:
    """Register the workflow's run (idempotent on its response id); its ``run_…`` ref."""
    return await _register(workflow_id)


@DBOS.step(name="bridge.send")
async def send(
    run_ref: str | None, server: str, tool: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """Send the call once (write-ahead); the task it made, if any, is polled by the workflow
    from now on, not by this process's poll scheduler: first here, after the server's
    interval, until its state changes (:func:`_watch`; a task that ends within the attached
    ``poll_window_s`` is one step). ``run_ref`` None: the workflow's own run, registered
    here (idempotent on its response id: no step of its own)."""
    workflow_id, step_id = _context()
    here = attached()
    if run_ref is None:
        run_ref = await _register(workflow_id)
    run = here.run(run_ref)
    op_id = operation_id(workflow_id, step_id)
    outcome = await run.call_tool(server, tool, arguments, operation_id=op_id, wait=WaitMode.DETACH)
    sent: dict[str, Any] = {
        "run_ref": run_ref,
        "operation_id": op_id,
        "op_ref": outcome.op_ref,
        "task": None,
    }
    if isinstance(outcome, TaskPending | TaskSettled | TaskHandle):
        made = outcome.task
        here.take(made.ref)  # out of the scheduler: the workflow polls it from here on
        interval_ms = here.next_delay_ms(made.poll_interval_ms, None)
        wait_ms: int | None = interval_ms
        asking = made.status is TaskStatus.INPUT_REQUIRED
        if asking or not made.is_open or interval_ms > here.poll_window_s * 1000:
            wait_ms = None  # polled at once: the workflow hears of it in this checkpoint
        task, carried, paced = await _watch(here, made, HostPoll(), wait_ms)
        asking = task.status is TaskStatus.INPUT_REQUIRED
        sent["task"] = await _observed(run, task, carried, after_seq=0, asking=asking)
        _pace(sent["task"], paced)
        _remember(task, sent["task"])
    elif isinstance(outcome, InputPending):  # MRTR: input asked for before any task
        sent["asking"] = [request.input_ref for request in outcome.inputs]
    _sent[workflow_id] = sent
    return sent


@DBOS.step(name="bridge.call_input")
async def call_input(run_ref: str, operation_id: str) -> dict[str, Any]:
    """A call that asked for input before any task (MRTR), after the workflow's durable
    sleep: still waiting (``waiting``: its unanswered input references), or moved on once
    answered (the bridge that took the answer sent the call again): the task it made, taken
    here and polled from now on as a sent call's (``task``), or a settled call (``task``
    None)."""
    here = attached()
    run = here.run(run_ref)
    record = await run.operation(operation_id)
    if record is None:
        raise BridgeError(f"operation {operation_id!r} is not recorded in run {run_ref}")
    if record.task is not None:
        made = record.task
        here.take(made.ref)
        task, carried, paced = await _watch(here, made, HostPoll(), None)
        asking = task.status is TaskStatus.INPUT_REQUIRED
        observed = await _observed(run, task, carried, after_seq=0, asking=asking)
        _pace(observed, paced)
        _remember(task, observed)
        return {"moved_on": True, "waiting": [], "task": observed}
    if record.state in (CallState.INPUT_REQUIRED, CallState.SENT):  # SENT: the retry in flight
        waiting = [r.input_ref for r in await run.pending_inputs() if r.op_ref == record.ref]
        return {"moved_on": False, "waiting": waiting, "task": None}
    return {"moved_on": True, "waiting": [], "task": None}


# Preemptible: a workflow cancelled while this step polls a task that does not change is
# stopped by DBOS (within its cancellation check interval), not at the end of the window.
@DBOS.step(name="bridge.poll", preemptible=True)
async def poll(run_ref: str, last: dict[str, Any]) -> dict[str, Any]:
    """The task polled (:func:`_watch`) after the workflow's durable sleep; the last
    observation with the input requests it waits on and the answers recorded since the last
    step's cursor (each reaches the workflow in one step's output). ``last``: the previous
    step's output (what it carries: failures in a row for the backoff, a cancel
    acknowledged)."""
    here = attached()
    run = here.run(run_ref)
    carried = HostPoll(**last["carried"])
    handle = _recall(last)
    task, polled, paced = await _watch(here, handle, carried, None, status=last["status"])
    # Answers are read only around input_required: the last step saw it, or this one does.
    asking = last["status"] == TaskStatus.INPUT_REQUIRED.value
    asking = asking or task.status is TaskStatus.INPUT_REQUIRED
    observed = await _observed(run, task, polled, after_seq=last["after_seq"], asking=asking)
    _pace(observed, paced)
    _remember(task, observed)
    return observed


def _pace(observed: dict[str, Any], paced: tuple[float, int]) -> None:
    """When the workflow polls next: ``since_poll_ms``, how long ago the step's last poll was
    sent, and ``wait_ms``, its durable sleep: the rest of the next (jittered) interval, so
    that polls are an interval apart start to start, not an interval plus the recording and
    the checkpoint; after a failed poll the backoff is slept whole."""
    polled_at, next_ms = paced
    since = round((time.monotonic() - polled_at) * 1000)
    observed["since_poll_ms"] = since
    backoff = observed["carried"]["backoff_ms"]
    observed["wait_ms"] = next_ms if backoff is not None else max(0, next_ms - since)


async def _watch(
    here: Attached,
    handle: TaskView | str,
    carried: HostPoll,
    wait_ms: int | None,
    *,
    status: str | None = None,
) -> tuple[TaskView, HostPoll, tuple[float, int]]:
    """``tasks/get`` of the task, recorded, until what the workflow holds would change (see
    :func:`_changed`) or the attached ``poll_window_s`` is spent: a task that stays
    ``working`` costs one checkpoint per window, not one per poll. The waits between these
    polls (and ``wait_ms`` before the first) are the server's interval, in process: a step
    re-run after a crash polls again, which is what a poll is for.

    ``handle``: the task as the send step's call just recorded it, or as this process read
    it after the workflow's last poll (:func:`_recall`), or its reference (the ledger is read
    afresh, with ``status`` the one the workflow holds). Each poll
    after the first starts from the task as the previous one returned it (read from the
    ledger after that poll): a poll of a task that does not change costs one ledger read.
    Returns the task, what the next poll carries, and when (monotonic) the last poll started
    with the wait before the next (the server's interval jittered, or the backoff)."""
    deadline = time.monotonic() + here.poll_window_s
    known = handle if isinstance(handle, TaskView) else None
    task_ref = handle.ref if isinstance(handle, TaskView) else handle
    if isinstance(handle, TaskView):
        status = handle.status.value
    assert status is not None
    started = time.monotonic()  # when the last poll started (first: the handle's arrival)
    while True:
        due_ms = None
        if wait_ms is not None:
            # Start to start: the interval runs from when the last poll's request left, not
            # from when its recording returned (which queues with every other handle's).
            wait_s = max(0.0, started + wait_ms / 1000 - time.monotonic())
            due_ms = wall_clock_ms() + round(wait_s * 1000)
            await anyio.sleep(wait_s)
        started = time.monotonic()
        task, polled = await here.poll(task_ref, carried, due_ms=due_ms, known=known)
        if polled.sent_ago_ms is not None:  # when it left, after any wait for a free slot
            started = time.monotonic() - polled.sent_ago_ms / 1000
        known = task
        wait_ms = here.next_delay_ms(task.poll_interval_ms, polled.backoff_ms)
        if _changed(status, task, carried, polled) or started + wait_ms / 1000 > deadline:
            return task, polled, (started, wait_ms)
        carried = polled


def _changed(status: str, task: TaskView, before: HostPoll, after: HostPoll) -> bool:
    """Whether the workflow must hear of this poll now (a checkpoint): another status than
    it holds, the task closed or asking for input (answers are read step by step), a failed
    poll (its backoff is a durable sleep), or a cancel just acknowledged."""
    return (
        task.status.value != status
        or not task.is_open
        or task.status is TaskStatus.INPUT_REQUIRED
        or after.failures > 0
        or after.cancel_sent != before.cancel_sent
    )


async def _observed(
    run: Run, task: TaskView, carried: HostPoll, *, after_seq: int, asking: bool
) -> dict[str, Any]:
    """The task's status and inputs as the ledger has them, and what the next poll carries.
    ``asking`` (the task is or just was ``input_required``): the answers recorded on the run
    after ``after_seq``, and the cursor moved past them; otherwise nothing more is read."""
    answered: list[str] = []
    waiting: list[str] = []
    last = after_seq
    task_ref, status = task.ref, task.status
    if asking:
        last = (await run.view()).event_count
        if last > after_seq:
            # Run.subscribe is an async generator (typed as an iterator): closed here.
            reading = cast(AsyncGenerator[ev.BridgeEvent, None], run.subscribe(after_seq=after_seq))
            async with aclosing(reading) as events:
                async for event in events:
                    if isinstance(event, ev.TaskInputAnswered) and event.task_ref == task_ref:
                        answered.append(event.input_ref)
                    if event.seq >= last:
                        break
        if task.is_open and status is TaskStatus.INPUT_REQUIRED:
            waiting = [r.input_ref for r in await run.pending_inputs() if r.task_ref == task_ref]
    return {
        "task_ref": task_ref,
        "status": status.value,
        "open": task.is_open,
        "answered": answered,
        "waiting": waiting,
        "after_seq": last,
        "poll_interval_ms": task.poll_interval_ms,
        "carried": asdict(carried),
    }
