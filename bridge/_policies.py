"""The explicit choices a harness makes about nested MCP tasks (pure data, no I/O).

Nothing about one lifecycle is inferred from the other; where the two must interact, a policy
the harness chose says how. Every default is the safe one: never cancel what the harness did
not ask to cancel, never repeat what may have happened, never invent a result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class WaitMode(StrEnum):
    """How the outer step waits for an inner task."""

    WAIT = "wait"  # block the step until terminal, or until the deadline (recoverable failure)
    DETACH = "detach"  # return at once; the result arrives later as a task.terminal event
    ASK = "ask"  # block; input_required is surfaced and the wait pauses for the host's answer
    FAIL_RECOVERABLE = "fail_recoverable"  # the step fails (recoverably) if it becomes a task


class UnknownOutcomePolicy(StrEnum):
    """What to do when a call may have reached the server but nothing definite came back."""

    REPORT = "report"  # default: surface it, never repeat the call
    RETRY_IF_SAFE = "retry_if_safe"  # repeat only read-only / idempotent / allow-listed tools


class OnOuterCancel(StrEnum):
    """What cancelling the outer response does to the tasks open inside it."""

    LEAVE_RUNNING = "leave_running"  # default: a cancelled response cancels nothing inside it
    CANCEL_INNER = "cancel_inner"  # opt-in: send tasks/cancel (recorded as intent)


class OnWorkflowCancel(StrEnum):
    """What a durable engine's workflow cancellation (Temporal, DBOS) does to a task the
    workflow is waiting for: a workflow's cancellation never implies ``tasks/cancel`` unless
    this says so."""

    LEAVE = "leave"  # default: nothing is sent; the bridge keeps the handle and watches it
    CANCEL_TASK = "cancel_task"  # ask the server with ``tasks/cancel`` (intent, not proof)


class OnOuterEnd(StrEnum):
    """What the end of the outer response does to the tasks still open inside it."""

    KEEP_WATCHING = "keep_watching"  # default: open tasks are still polled to their end
    REPORT = "report"  # one outer.open_tasks event, then they are no longer watched


class UnansweredInput(StrEnum):
    """What the bridge does with an input request nobody will answer (see
    :mod:`bridge._mcp.inputs.handlers`): a kind the host did not declare, or a handler that
    failed."""

    DECLINE = "decline"  # default: an elicitation is declined; a kind without one is not sent
    LEAVE_PENDING = "leave_pending"  # kept for the host (``pending_inputs``), nothing is sent


class OnStuckInput(StrEnum):
    """What the bridge does when a task's input request stays unanswered past the deadline."""

    REPORT = "report"  # default: one task.input_stuck event, the task is left as it is
    CANCEL = "cancel"  # opt-in: then tasks/cancel, recorded as "policy:input_stuck"


@dataclass(frozen=True, slots=True)
class InputPolicy:
    """Input requests the host did not (or could not) answer.

    ``stuck_after_polls`` / ``stuck_after_ms``: a task still ``input_required`` with an
    unanswered key after this many polls (counted by this process) or this long since the key
    was first recorded is *stuck* (the C# SDK's requester gives up after 60 polls). Both off by
    default: a person may legitimately take hours to answer.
    """

    undeclared: UnansweredInput = UnansweredInput.DECLINE
    handler_failed: UnansweredInput = UnansweredInput.DECLINE
    stuck_after_polls: int | None = None
    stuck_after_ms: int | None = None
    on_stuck: OnStuckInput = OnStuckInput.REPORT

    def __post_init__(self) -> None:
        for bound in (self.stuck_after_polls, self.stuck_after_ms):
            if bound is not None and bound < 1:
                raise ValueError("a stuck-input deadline is at least 1 (or None: off)")

    @property
    def watches_stuck(self) -> bool:
        """Whether a stuck-input deadline is set (after a number of polls or a time)."""
        return self.stuck_after_polls is not None or self.stuck_after_ms is not None


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """The choices for one tool (or server, or the default): how a step waits, its deadline, and
    what to do with an unknown outcome."""

    wait: WaitMode = WaitMode.WAIT
    wait_deadline_s: float = 120.0  # for WAIT and ASK (ASK does not count input time)
    unknown_outcomes: UnknownOutcomePolicy = UnknownOutcomePolicy.REPORT


@dataclass(frozen=True, slots=True)
class Policies:
    """Per tool (``"server.tool"`` or ``"tool"``), per server, then the default."""

    default: ToolPolicy = ToolPolicy()
    per_server: dict[str, ToolPolicy] = field(default_factory=dict)
    per_tool: dict[str, ToolPolicy] = field(default_factory=dict)
    on_outer_cancel: OnOuterCancel = OnOuterCancel.LEAVE_RUNNING
    on_outer_end: OnOuterEnd = OnOuterEnd.KEEP_WATCHING
    inputs: InputPolicy = InputPolicy()

    def for_tool(self, server: str, tool: str) -> ToolPolicy:
        """The policy for ``server``'s ``tool``: per ``server.tool``, then per tool, then per
        server, then the default."""
        return (
            self.per_tool.get(f"{server}.{tool}")
            or self.per_tool.get(tool)
            or self.per_server.get(server)
            or self.default
        )
