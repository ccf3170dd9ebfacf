"""What a bridged ``tools/call`` returns: exactly one of four explicit outcomes; and what
answering an input request did."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bridge.errors import NoToolResult
from bridge.inputs import InputRequest
from bridge.ledger.views import TaskView
from bridge.lifecycle import Admission
from bridge.mcp.tool_result import ToolResultAccess

# JSON-RPC error codes that mean "the server serves this tool only as a task": -32021 in the
# final text, -32003 in older drafts (kept here, not in bridge.mcp.wire, so that reading a
# result never loads the SDK).
MISSING_CAPABILITY_CODES = frozenset({-32021, -32003})


@dataclass(frozen=True, slots=True)
class TaskHandle(ToolResultAccess):
    """The server created a task; the handle is committed to the ledger and being watched."""

    op_ref: str
    task: TaskView
    replayed: bool = False  # the operation id had already reached this outcome

    @property
    def task_ref(self) -> str:
        return self.task.ref

    def _stored_result(self) -> Any:
        raise NoToolResult("the call became a task: its result arrives with task.terminal")


@dataclass(frozen=True, slots=True)
class InlineResult(ToolResultAccess):
    """The server answered with an ordinary ``CallToolResult`` (possibly ``isError``)."""

    op_ref: str
    result: Any
    truncated: bool = False
    replayed: bool = False

    @property
    def is_error(self) -> bool:
        return bool(isinstance(self.result, dict) and self.result.get("isError"))

    def _stored_result(self) -> Any:
        return self.result


@dataclass(frozen=True, slots=True)
class RejectedCall(ToolResultAccess):
    """The server answered with a JSON-RPC error: the request itself was refused."""

    op_ref: str
    error: Any
    replayed: bool = False

    @property
    def code(self) -> int | None:
        code = self.error.get("code") if isinstance(self.error, dict) else None
        return code if isinstance(code, int) else None

    @property
    def missing_tasks_capability(self) -> bool:
        """The server can serve this call only as a task (-32021; -32003 in older drafts)."""
        return self.code in MISSING_CAPABILITY_CODES

    def _stored_result(self) -> Any:
        raise NoToolResult(f"the server refused the call (JSON-RPC error {self.code})")


@dataclass(frozen=True, slots=True)
class UnknownOutcome(ToolResultAccess):
    """The request may have reached the server, but neither a handle nor a result came back.

    An ``call.unknown_outcome`` event was written. Nothing was retried unless the policy allowed
    it for a read-only or idempotent tool, or for a consequential one the host's admission check
    declared ``not_admitted`` (then ``retries`` holds what the retries returned).
    """

    op_ref: str
    reason: str
    retries: tuple[CallOutcome, ...] = ()
    replayed: bool = False
    # The server's Retry-After (429/503), capped: a policy-allowed retry waits this long first.
    retry_after_ms: int | None = None
    # What the host's admission check (or the host) said, when one was asked: see
    # bridge.mcp.admission. None: nobody was asked.
    admission: Admission | None = None

    def _stored_result(self) -> Any:
        raise NoToolResult(f"the call's outcome is unknown ({self.reason})")


@dataclass(frozen=True, slots=True)
class InputPending(ToolResultAccess):
    """The server needs input before it does anything (MRTR: an ``InputRequiredResult`` to
    ``tools/call``, leg ``leg`` of the call). Nothing is in flight; the call is recorded
    ``input_required`` and one ``call.input_required`` event per input was written. Answer
    every input (``inputs[i].accept(...)``, ``Bridge.answer_input``): the call is then sent
    again with the answers and the server's state, and the last answer's receipt carries
    what that leg returned. Still listed by ``Bridge.pending_inputs`` after a restart."""

    op_ref: str
    leg: int
    inputs: tuple[InputRequest, ...]
    replayed: bool = False

    def _stored_result(self) -> Any:
        raise NoToolResult(f"the call {self.op_ref} waits for input (leg {self.leg})")


CallOutcome = TaskHandle | InlineResult | RejectedCall | UnknownOutcome | InputPending


class AnswerDelivery(StrEnum):
    """What happened to a recorded answer to an input request."""

    DELIVERED = "delivered"  # the server acknowledged the tasks/update carrying it
    QUEUED = "queued"  # not acknowledged yet (transport trouble): resent before the next poll
    TASK_LOST = "task_lost"  # the server no longer knows the task (-32602): task.lost written
    # MRTR (an input of a call, before any task): other inputs of the same leg still need an
    # answer; the call is sent again once the last one is answered.
    AWAITING_INPUTS = "awaiting_inputs"
    RETRIED = "retried"  # MRTR: the call was sent again with the answers; see ``outcome``


@dataclass(frozen=True, slots=True)
class AnswerReceipt:
    """An answer was recorded (write-ahead, exactly once per input request).

    For an MRTR input (``op_ref`` set, ``task_ref`` None), ``outcome`` is what the retried
    call returned when this answer completed its leg (``RETRIED``): a result, a task handle,
    another :class:`InputPending`, or an unknown outcome. ``QUEUED`` there means the server
    could not be reached: nothing was sent, the retry happens on the next start (or answer).
    """

    task_ref: str | None
    input_ref: str
    delivery: AnswerDelivery
    op_ref: str | None = None
    outcome: CallOutcome | None = None

    @property
    def delivered(self) -> bool:
        return self.delivery in (AnswerDelivery.DELIVERED, AnswerDelivery.RETRIED)
