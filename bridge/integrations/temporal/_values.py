"""The values a bridged call passes between a Temporal workflow and the bridge's activities.

Plain dataclasses: Temporal's default data converter writes them into workflow history as JSON,
and the workflow sandbox imports this module without the bridge's runtime. The handle recorded
in history is made of bridge references only (``run_…``, ``op_…``, ``tk_…``): the server's raw
task id stays in the bridge's ledger, as it does everywhere else.
"""

# No `from __future__ import annotations`: the data converter resolves these hints inside
# the workflow sandbox, where this module's globals are not importable by name.
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# Activity, update and query names: the workflow side calls them by name, so a workflow module
# never imports the activities (and the bridge's runtime) into the sandbox.
START_CALL = "bridge.start_call"
WATCH_TASK = "bridge.watch_task"
WATCH_CALL = "bridge.watch_call"
ANSWER_INPUT = "bridge.answer_input"
CANCEL_TASK = "bridge.cancel_task"
ANSWER_UPDATE = "bridge.answer"
PENDING_INPUTS_QUERY = "bridge.pending_inputs"


class OutcomeKind(StrEnum):
    """How a bridged call ended, as the workflow sees it."""

    COMPLETED = "completed"  # a tool result (inline, or the task's); ``is_error`` may be set
    FAILED = "failed"  # the task failed (a JSON-RPC error), or the call was refused
    CANCELLED = "cancelled"  # the task ended cancelled
    LOST = "lost"  # the handle was lost (server restarted, -32602, TTL): the outcome is unknown
    UNKNOWN = "unknown_outcome"  # sent, no reply kept: it may or may not have run; never resent


class OnWorkflowCancel(StrEnum):
    """What a workflow's cancellation does to a task it is waiting for."""

    LEAVE = "leave"  # nothing is sent; the bridge keeps the handle and goes on watching it
    CANCEL_TASK = "cancel_task"  # ask the server with ``tasks/cancel`` (intent, not proof)


@dataclass(frozen=True)
class ToolCall:
    """One bridged call as the workflow asked it; ``operation_id`` makes every retry of it a
    replay of what the first attempt recorded."""

    workflow_id: str
    server: str
    tool: str
    arguments: dict[str, Any]
    operation_id: str


@dataclass(frozen=True)
class TaskRefs:
    """The task handle as workflow history holds it: references into the bridge's ledger."""

    run_ref: str
    op_ref: str
    task_ref: str
    poll_interval_ms: int | None = None


@dataclass(frozen=True)
class ToolOutcome:
    """What a bridged call ended with. ``result`` is the ``CallToolResult`` as JSON (``None``
    when there is none: lost, unknown, failed); ``text`` its text content joined."""

    kind: OutcomeKind
    op_ref: str
    task_ref: str | None = None
    is_error: bool = False
    result: dict[str, Any] | None = None
    text: str | None = None
    detail: str | None = None

    @property
    def succeeded(self) -> bool:
        """A tool result that is not an error: the only outcome that says the work was done."""
        return self.kind is OutcomeKind.COMPLETED and not self.is_error


@dataclass(frozen=True)
class PendingInput:
    """An input request waiting for an answer (``bridge.answer`` update, or the bridge's CLI,
    API or console): of the task ``task_ref``, or of the call ``op_ref`` before any task
    exists (MRTR; ``task_ref`` is then None)."""

    input_ref: str
    task_ref: str | None
    method: str
    message: str | None = None
    requested_schema: dict[str, Any] | None = None
    op_ref: str | None = None


@dataclass(frozen=True)
class Started:
    """What starting a call gave: a handle to watch, already an outcome, or (MRTR) the inputs
    the server asked for before creating anything."""

    handle: TaskRefs | None = None
    outcome: ToolOutcome | None = None
    asked: list[PendingInput] = field(default_factory=list)


@dataclass(frozen=True)
class CallWatchRequest:
    """Wait on a call that asked for input before any task (MRTR) until one of its inputs is
    answered or the call moved on (the answered call was sent again)."""

    call: ToolCall
    op_ref: str
    asked: list[str]  # the inputs of the call's current round
    waiting: list[str]  # of those, not yet answered


@dataclass(frozen=True)
class CallObservation:
    """One of: an input of the round was answered, or what the call came to after its round."""

    answered: str | None = None
    started: Started | None = None


@dataclass(frozen=True)
class WatchRequest:
    """Watch one handle until something the workflow must know happens."""

    call: ToolCall
    handle: TaskRefs
    waiting: list[str] = field(default_factory=list)  # inputs asked and not yet answered
    seen: list[str] = field(default_factory=list)  # every input ever reported


@dataclass(frozen=True)
class Observation:
    """One of: the task settled, a new input was asked, or an input was answered elsewhere."""

    settled: ToolOutcome | None = None
    asked: PendingInput | None = None
    answered: str | None = None  # an input_ref answered through the bridge


@dataclass(frozen=True)
class InputAnswer:
    """The argument of the ``bridge.answer`` update: accept with JSON ``content`` or
    ``KEY=VALUE`` ``texts``, or decline, or cancel."""

    input_ref: str
    action: str = "accept"
    content: dict[str, Any] | None = None
    texts: dict[str, str] | None = None


@dataclass(frozen=True)
class AnswerRequest:
    """The answer activity's input: the answer already built and checked by the validator."""

    call: ToolCall
    handle: TaskRefs | None  # None: an input of the call ``op_ref`` before any task (MRTR)
    input_ref: str
    answer: dict[str, Any]
    op_ref: str | None = None


@dataclass(frozen=True)
class CallOptions:
    """Timeouts of the bridge's activities (seconds). ``heartbeat_timeout_s``: how soon a
    watch held by a dead worker is retried on another one. ``task_queue``: where the bridge's
    activities run when the workflow's worker does not have them; unset, the call starts as a
    local activity of the worker running the workflow (its result, the handle, is a marker in
    history before the watch is scheduled)."""

    start_timeout_s: float = 60.0
    heartbeat_timeout_s: float = 10.0
    watch_timeout_s: float = 7 * 24 * 3600.0
    answer_timeout_s: float = 60.0
    task_queue: str | None = None
