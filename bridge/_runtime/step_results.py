"""What a bridged step returns beyond the raw call outcomes (:mod:`bridge._outcomes`):
the task's fate as the step's wait policy saw it. Every step result reads its tool result the
same way: ``text()`` and ``to_call_tool_result()``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from bridge._errors import NoToolResult
from bridge._ledger.reads.views import TaskView
from bridge._lifecycle import TaskStatus
from bridge._mcp.wire.tool_result import call_tool_result, error_result
from bridge._outcomes import CallOutcome, OutcomeKind

if TYPE_CHECKING:
    import mcp_types


@dataclass(frozen=True, slots=True)
class TaskSettled(CallOutcome):
    """The step waited and the task reached a terminal status (or was declared lost).

    ``text()`` needs a completed task's result. ``to_call_tool_result()`` always answers for a
    settled task: the stored result when there is one; otherwise an ``isError`` result that
    says what happened (failed with a JSON-RPC error, cancelled, or lost) — a lost task has no
    result and the text never pretends otherwise.
    """

    kind: ClassVar[OutcomeKind] = OutcomeKind.TASK_ENDED
    op_ref: str
    task: TaskView
    replayed: bool = False  # the operation id had already made this task

    @property
    def status(self) -> TaskStatus:
        """The task's last observed status."""
        return self.task.status

    @property
    def lost(self) -> bool:
        """Whether the task was lost (its outcome is unknown) rather than ended."""
        return self.task.lost_reason is not None

    def _stored_result(self) -> Any:
        task = self.task
        if task.result is not None and task.terminal_at_ms is not None:
            return task.result
        if task.terminal_at_ms is None and task.lost_reason is not None:
            raise NoToolResult(f"task {task.ref} was lost ({task.lost_reason.value})")
        raise NoToolResult(f"task {task.ref} ended {task.status.value} without a tool result")

    def to_call_tool_result(self) -> mcp_types.CallToolResult:
        """The settled task as a ``CallToolResult``: the stored result, or an error result saying
        how it failed or that it was lost."""
        task = self.task
        if task.result is not None and task.terminal_at_ms is not None:
            return call_tool_result(task.result)
        if task.terminal_at_ms is None and task.lost_reason is not None:
            detail = f": {task.lost_detail}" if task.lost_detail else ""
            return error_result(
                f"task lost ({task.lost_reason.value}){detail}; its outcome is unknown"
            )
        message = task.error.get("message") if isinstance(task.error, dict) else None
        return error_result(f"task {task.status.value}" + (f": {message}" if message else ""))


@dataclass(frozen=True, slots=True)
class TaskPending(CallOutcome):
    """``detach``: the handle is durable and watched; the result arrives later as an event."""

    kind: ClassVar[OutcomeKind] = OutcomeKind.TASK_OPEN
    op_ref: str
    task: TaskView
    replayed: bool = False

    def _stored_result(self) -> Any:
        raise NoToolResult(f"task {self.task.ref} is still open (detached step)")


@dataclass(frozen=True, slots=True)
class RecoverableFailure(CallOutcome):
    """The step stopped waiting (deadline, or ``fail_recoverable``). Not a result: the handle
    is kept and watched, a ``step.recoverable_failure`` event says so."""

    kind: ClassVar[OutcomeKind] = OutcomeKind.STOPPED_WAITING
    op_ref: str
    task: TaskView
    reason: str
    replayed: bool = False

    def _stored_result(self) -> Any:
        raise NoToolResult(f"the step gave up waiting: {self.reason}")
