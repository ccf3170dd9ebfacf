"""Pure lifecycle state machines: no I/O, no clock, no database.

Two protocol lifecycles live side by side and are never derived from one another:

* the outer UHP response: ``in_progress`` -> ``completed | failed | incomplete | cancelled``;
* the inner MCP task: ``working <-> input_required`` -> ``completed | failed | cancelled``.

Next to them sit two *bridge verdicts* that are not protocol states and are kept in separate
fields so they can never be mistaken for one:

* ``unknown`` belongs to a dispatch: the ``tools/call`` left, but neither a handle nor a result
  came back. Nothing is known about whether the server admitted the work.
* ``lost`` belongs to a task handle: the server answered ``-32602``, the TTL passed without a
  terminal status, or the server identity is gone. A real terminal status observed later
  supersedes the verdict; nothing ever overwrites a real terminal status.

The functions here only *decide*; the ledger applies the decision and records the event.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OuterStatus(StrEnum):
    """Status of a UHP response (a "task" in UHP terms)."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """Whether the outer response has ended (any status but ``in_progress``)."""
        return self is not OuterStatus.IN_PROGRESS


class TaskStatus(StrEnum):
    """Status of an MCP task (``io.modelcontextprotocol/tasks``)."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """Whether the task has ended: ``completed``, ``failed`` or ``cancelled``."""
        return self in _TERMINAL_TASK


_TERMINAL_TASK = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})


class CallState(StrEnum):
    """Write-ahead state of one ``tools/call``: ``pending -> sent -> task | result | unknown``.

    ``input_required``: the server answered with an ``InputRequiredResult`` (MRTR) before any
    task existed; nothing is in flight until the host answers and the next leg is ``sent``.
    """

    PENDING = "pending"
    SENT = "sent"
    INPUT_REQUIRED = "input_required"
    TASK = "task"
    RESULT = "result"
    UNKNOWN = "unknown"

    @property
    def is_settled(self) -> bool:
        """Whether the call's outcome is on record: a task, a result, or ``unknown``."""
        return self in (CallState.TASK, CallState.RESULT, CallState.UNKNOWN)


class LostReason(StrEnum):
    """Why a handle was given up on. A verdict, never a task status."""

    NOT_FOUND = "not_found"  # -32602 from tasks/get: unknown or expired taskId
    TTL_EXPIRED = "ttl_expired"  # createdAt + ttlMs passed without a terminal status
    SERVER_GONE = "server_gone"  # the server identity the handle belongs to is gone


class Admission(StrEnum):
    """Whether the server admitted a call whose outcome is unknown (request sent, no handle, no
    result). A verdict on a dispatch, never a state: the dispatch stays ``unknown``."""

    ADMITTED = "admitted"  # the server took it; no handle reached the bridge: never resend
    NOT_ADMITTED = "not_admitted"  # the server never took it: sending it again is safe
    UNKNOWN = "unknown"  # nobody can tell yet: only the host resolves it

    @property
    def is_final(self) -> bool:
        """Whether a verdict was reached (anything but ``unknown``)."""
        return self is not Admission.UNKNOWN


class Change(StrEnum):
    """What an observation does to the recorded state."""

    APPLY = "apply"  # a legal transition: record it
    UNCHANGED = "unchanged"  # same status observed again (details may still be refreshed)
    SUPERSEDE_LOST = "supersede_lost"  # a real terminal status replaces a lost verdict
    REGRESSION = "regression"  # illegal move away from a terminal state: anomaly, ignored


@dataclass(frozen=True, slots=True)
class Decision:
    change: Change
    reason: str = ""

    @property
    def records_status(self) -> bool:
        return self.change in (Change.APPLY, Change.SUPERSEDE_LOST)

    @property
    def is_anomaly(self) -> bool:
        return self.change is Change.REGRESSION


_APPLY = Decision(Change.APPLY)
_UNCHANGED = Decision(Change.UNCHANGED)


def decide_outer(current: OuterStatus | None, observed: OuterStatus) -> Decision:
    """Decide what an observed UHP response status does to the recorded one.

    ``current`` is ``None`` while the server has not acknowledged the response yet.
    """
    if current is None:
        return _APPLY
    if current == observed:
        return _UNCHANGED
    if current.is_terminal:
        return Decision(
            Change.REGRESSION, f"response is {current.value}, observed {observed.value}"
        )
    return _APPLY  # in_progress -> any terminal state


def decide_task(current: TaskStatus, observed: TaskStatus, *, lost: bool = False) -> Decision:
    """Decide what an observed MCP task status does to the recorded one.

    ``lost`` says whether the handle currently carries a ``lost`` verdict. A terminal
    observation supersedes the verdict; a non-terminal one is recorded but leaves the
    verdict in place (the handle is still not trusted to reach a terminal state).
    """
    if current.is_terminal:
        if current == observed:
            return _UNCHANGED
        return Decision(Change.REGRESSION, f"task is {current.value}, observed {observed.value}")
    if lost and observed.is_terminal:
        return Decision(Change.SUPERSEDE_LOST)
    if current == observed:
        return _UNCHANGED
    return _APPLY  # working <-> input_required, or either -> terminal


def may_mark_lost(current: TaskStatus, already_lost: bool, *, outcome_stored: bool = True) -> bool:
    """A lost verdict applies only once, and only while no terminal outcome is stored: to a
    live handle, or to one the server *created* terminal whose outcome never arrived
    (``outcome_stored=False``: a ``completed`` create without its result is still due)."""
    if already_lost:
        return False
    return not current.is_terminal or not outcome_stored


_DISPATCH_NEXT: dict[CallState, frozenset[CallState]] = {
    CallState.PENDING: frozenset({CallState.SENT, CallState.UNKNOWN}),
    CallState.SENT: frozenset(
        {
            CallState.TASK,
            CallState.RESULT,
            CallState.UNKNOWN,
            CallState.INPUT_REQUIRED,
        }
    ),
    # Answered: the retry leg is committed as sent before it leaves (write-ahead again).
    CallState.INPUT_REQUIRED: frozenset({CallState.SENT}),
    CallState.TASK: frozenset(),
    CallState.RESULT: frozenset(),
    CallState.UNKNOWN: frozenset(),
}


def may_advance_dispatch(current: CallState, target: CallState) -> bool:
    """``pending -> sent -> task | result | unknown``; a settled dispatch never moves.
    ``sent -> input_required -> sent`` is one more MRTR leg of the same call.

    ``pending -> unknown`` is allowed because after a crash a pending intent cannot prove the
    request never left the process (the write of ``sent`` may be what was lost).
    """
    return target in _DISPATCH_NEXT[current]
