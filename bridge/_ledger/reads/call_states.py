"""Where each call of a run stands, and what that says about the run: derived from the
ledger's views at read time, never stored (pure: no I/O, no clock).

A call is its dispatch and the task it became, if any. Its state is one of
:class:`Standing`; a retry the bridge sent for a call declared not admitted
(``<operation id>~retry<n>``) stands for the call it retried. :func:`ending_of` says how a
run whose calls have all ended ended (the gateway ends its own runs with it), and
:mod:`bridge.cli._status_lines` words the same facts for operators.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bridge._ledger.outcome import is_truncation_marker
from bridge._ledger.reads.views import CallView, TaskView
from bridge._lifecycle import Admission, CallState, OuterStatus, TaskStatus

_RETRY = re.compile(r"~retry\d+$")


class Standing(StrEnum):
    """Where one call stands."""

    IN_FLIGHT = "in_flight"  # sent (or about to be), or a task still working
    WAITING_INPUT = "waiting_input"  # the server asked for input (a task's, or MRTR's)
    COMPLETED = "completed"
    FAILED = "failed"  # isError, a JSON-RPC error, a failed task
    CANCELLED = "cancelled"
    UNRESOLVED = "unresolved"  # outcome unknown, task lost or detached before it ended

    @property
    def is_open(self) -> bool:
        """Still in flight or waiting on input: the run it belongs to has not ended."""
        return self in (Standing.IN_FLIGHT, Standing.WAITING_INPUT)


@dataclass(frozen=True, slots=True)
class CallStanding:
    """One call as read: its dispatch, its task (if it became one) and its state.
    ``verdict``: the final admission verdict a person (or the admission hook) gave on an
    unresolved call, if any: its result stays unknown, but whether it ran is settled."""

    dispatch: CallView
    task: TaskView | None
    state: Standing
    verdict: Admission | None = None


def _is_error_result(result: Any) -> bool:
    if is_truncation_marker(result):  # only the preview is kept: read the flag off it
        return '"isError":true' in str(result.get("preview", ""))
    if not isinstance(result, dict):
        return False
    return bool(result.get("isError")) or ("error" in result and "content" not in result)


def task_state(task: TaskView) -> Standing:
    """Where a task stands (a terminal status observed after ``lost`` wins, as it does in
    the ledger)."""
    if task.terminal_at_ms is not None:
        if task.status is TaskStatus.COMPLETED:
            return Standing.FAILED if _is_error_result(task.result) else Standing.COMPLETED
        return Standing.FAILED if task.status is TaskStatus.FAILED else Standing.CANCELLED
    if task.lost_reason is not None or task.detached_at_ms is not None:
        return Standing.UNRESOLVED
    if task.status is TaskStatus.INPUT_REQUIRED:
        return Standing.WAITING_INPUT
    return Standing.IN_FLIGHT


def dispatch_state(dispatch: CallView, task: TaskView | None) -> Standing:
    """Where one dispatch stands, with the task it became."""
    match dispatch.state:
        case CallState.PENDING | CallState.SENT:
            return Standing.IN_FLIGHT
        case CallState.INPUT_REQUIRED:
            return Standing.WAITING_INPUT
        case CallState.UNKNOWN:
            return Standing.UNRESOLVED
        case CallState.RESULT:
            return Standing.FAILED if _is_error_result(dispatch.result) else Standing.COMPLETED
        case CallState.TASK:
            return task_state(task) if task is not None else Standing.UNRESOLVED
    return Standing.UNRESOLVED  # pragma: no cover - every CallState is matched above


def calls_of(
    dispatches: Sequence[CallView],
    tasks: Sequence[TaskView],
    verdicts: Mapping[str, Admission] | None = None,
) -> list[CallStanding]:
    """The run's calls, oldest first; a retry folds into the call it retried (its state is
    the call's state once the retry was sent). ``verdicts``: the latest admission verdict on
    each dispatch (by ``op_…``); only a final one on an unresolved call is kept."""
    by_ref = {t.ref: t for t in tasks}
    calls: dict[str, CallStanding] = {}
    for dispatch in dispatches:
        task = by_ref.get(dispatch.task_ref) if dispatch.task_ref else None
        state = dispatch_state(dispatch, task)
        verdict = (verdicts or {}).get(dispatch.ref)
        if state is not Standing.UNRESOLVED or verdict is None or not verdict.is_final:
            verdict = None
        view = CallStanding(dispatch, task, state, verdict)
        origin = _RETRY.sub("", dispatch.operation_id)
        if origin != dispatch.operation_id and origin in calls:
            calls[origin] = CallStanding(calls[origin].dispatch, task, view.state, view.verdict)
        else:
            calls[dispatch.operation_id] = view
    return list(calls.values())


@dataclass(frozen=True, slots=True)
class RunEnding:
    """How a run whose calls have all ended ended: the outer status and, unless it
    completed, why (JSON, stored as the run's error)."""

    status: OuterStatus
    error: dict[str, Any] | None


def counts(calls: Sequence[CallStanding]) -> dict[Standing, int]:
    """How many calls stand in each state (states with none left out)."""
    return dict(Counter(call.state for call in calls))


def ending_of(calls: Sequence[CallStanding]) -> RunEnding | None:
    """None while any call is open. Otherwise: ``incomplete`` when any call's outcome is
    unresolved (never a made-up success), else ``failed`` when any failed, else
    ``cancelled`` when any was cancelled, else ``completed``. A run without a single
    recorded call (every call refused before it was sent) is ``failed``."""
    if any(call.state.is_open for call in calls):
        return None
    by_state = counts(calls)
    summary = {state.value: n for state, n in sorted(by_state.items())}
    if not calls:
        return RunEnding(OuterStatus.FAILED, _why("no call was recorded in this run", summary))
    if Standing.UNRESOLVED in by_state:
        unresolved = [_ref(c) for c in calls if c.state is Standing.UNRESOLVED]
        why = _why("the outcome of some calls is unknown", summary)
        return RunEnding(OuterStatus.INCOMPLETE, {**why, "unresolved": unresolved})
    if Standing.FAILED in by_state:
        return RunEnding(OuterStatus.FAILED, _why("some calls failed", summary))
    if Standing.CANCELLED in by_state:
        return RunEnding(OuterStatus.CANCELLED, _why("some calls were cancelled", summary))
    return RunEnding(OuterStatus.COMPLETED, None)


def _ref(call: CallStanding) -> str:
    return call.task.ref if call.task is not None else call.dispatch.ref


def _why(message: str, summary: dict[str, int]) -> dict[str, Any]:
    return {"code": "calls_ended", "message": message, "calls": summary}
