"""What a bridged ``tools/call`` returns, and the input requests a call or task asks.

A call returns one type, :class:`CallOutcome`: its ``kind`` (:class:`OutcomeKind`) says which of
the explicit outcomes it is, and each outcome is a subclass an embedder can ``match`` on. An
:class:`InputRequest` is one question a task or a call (MRTR) asks the host; answering it gives
an :class:`AnswerReceipt`, whose ``outcome`` may again be a call outcome. The three refer to
one another, so they live in one module.

An :class:`InputRequest` comes from a ``task.input_required`` event, or a
``call.input_required`` event (a server that asked before creating any task: MRTR), through
``Run.input_request(event)``, or from ``Run.pending_inputs()`` (``Bridge.pending_inputs``:
every run's).
For an elicitation (``elicitation/create``) ``accept(content)`` / ``decline()`` / ``dismiss()``
send the MCP ``ElicitResult`` shape::

    {"action": "accept", "content": {...}}   {"action": "decline"}   {"action": "cancel"}

``accept`` checks ``content`` against the request's ``requestedSchema`` first: a bad answer
raises :class:`~bridge.errors.InvalidAnswer` and nothing is recorded or sent. Other methods
(``sampling/createMessage``) take the method's own result through ``respond``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from bridge._errors import InvalidAnswer, NoToolResult
from bridge._ledger.reads.views import TaskView
from bridge._lifecycle import Admission
from bridge._mcp.wire.tool_result import ToolResultAccess

ELICITATION = "elicitation/create"
SAMPLING = "sampling/createMessage"

# Sends one raw answer through the bridge (bound to principal, task and input request).
AnswerSender = Callable[[Any], Awaitable["AnswerReceipt"]]


@dataclass(frozen=True, slots=True)
class InputRequest:
    """One input request of one task, or of a call that has no task yet (MRTR: ``task_ref``
    is None and ``op_ref`` names the call; answering it sends the call again), as the host
    answers it."""

    principal: str
    task_ref: str | None
    input_ref: str  # the bridge reference (the server's key may embed the raw task id)
    method: str  # "elicitation/create", "sampling/createMessage", …
    params: dict[str, Any] = field(repr=False)  # server text, shown to the user
    _send: AnswerSender = field(repr=False, compare=False)
    op_ref: str | None = None  # set for an MRTR input (a call's, before any task)

    @property
    def message(self) -> str | None:
        """The question for the user (elicitation), if any."""
        message = self.params.get("message")
        return message if isinstance(message, str) else None

    @property
    def requested_schema(self) -> dict[str, Any] | None:
        """The JSON schema an accepted elicitation's ``content`` must match (form mode)."""
        schema = self.params.get("requestedSchema")
        return schema if isinstance(schema, dict) else None

    async def accept(
        self, content: dict[str, Any] | None = None, *, texts: dict[str, str] | None = None
    ) -> AnswerReceipt:
        """Accept, with JSON ``content`` or ``KEY=VALUE`` ``texts`` (coerced to the schema's
        types, as the CLI and console take them), checked against :attr:`requested_schema`
        (unknown fields included) by :func:`bridge._answers.build_answer`: a bad answer raises
        :class:`~bridge.errors.InvalidAnswer` naming every problem, and nothing is recorded or sent.
        A URL-mode elicitation has no schema and takes no content."""
        return await elicit(self, "accept", texts=texts, content=content)

    async def decline(self) -> AnswerReceipt:
        """The user explicitly said no."""
        return await elicit(self, "decline")

    async def dismiss(self) -> AnswerReceipt:
        """The user dismissed the request without choosing (the wire's ``cancel`` action; the
        task goes on: ``Run.cancel_task`` cancels a task)."""
        return await elicit(self, "cancel")

    async def respond(self, result: Any) -> AnswerReceipt:
        """Answer a method other than an elicitation (``sampling/createMessage``: a
        ``CreateMessageResult`` dumped to JSON) with the method's own result shape. An
        elicitation is answered only by :meth:`accept`, :meth:`decline` or :meth:`dismiss`."""
        if self.method == ELICITATION:
            detail = f"answer {ELICITATION} with accept(), decline() or dismiss()"
            raise InvalidAnswer(self.input_ref, detail)
        return await self._send(result)


async def elicit(
    request: InputRequest, action: Any, *, texts: dict[str, str] | None = None, content: Any = None
) -> AnswerReceipt:
    """The one checked way to answer an elicitation, by its wire ``action`` (``accept``,
    ``decline``, ``cancel``: what a client, a form or a resumed graph gives); a bad action or
    answer raises :class:`~bridge.errors.InvalidAnswer` and nothing is recorded or sent."""
    from bridge._answers import build_answer

    if request.method != ELICITATION:
        detail = f"{action} answers {ELICITATION}; answer {request.method} with respond()"
        raise InvalidAnswer(request.input_ref, detail)
    schema = request.requested_schema
    answer = build_answer(request.input_ref, schema, str(action), texts=texts, content=content)
    return await request._send(answer)


class OutcomeKind(StrEnum):
    """Which outcome a :class:`CallOutcome` is: one value per outcome class."""

    TASK_CREATED = "task_created"  # TaskHandle: the server made a task; not waited for
    RESULT = "result"  # InlineResult: an ordinary CallToolResult (possibly isError)
    REJECTED = "rejected"  # RejectedCall: a JSON-RPC error refused the request
    UNKNOWN_OUTCOME = "unknown_outcome"  # UnknownOutcome: sent, but nothing came back
    INPUT_REQUIRED = "input_required"  # InputPending: the server asks before it acts (MRTR)
    TASK_ENDED = "task_ended"  # TaskSettled: waited, and the task ended or was lost
    TASK_OPEN = "task_open"  # TaskPending: detached; the task is watched, its end is an event
    STOPPED_WAITING = "stopped_waiting"  # RecoverableFailure: the wait gave up; task kept


class CallOutcome(ToolResultAccess):
    """What a bridged call came to: the one type ``Run.call_tool`` returns.

    Switch on ``kind``, or ``match`` on the outcome classes (each is a frozen dataclass)::

        match outcome:
            case TaskSettled(task=task): ...
            case InlineResult(result=result): ...
            case InputPending(inputs=inputs): ...
            case UnknownOutcome(reason=reason): ...

    Every outcome has the call's ``op_ref`` and reads its tool result the same way:
    ``text()`` and ``to_call_tool_result()`` (which raise ``NoToolResult`` when there is none).
    """

    __slots__ = ()
    kind: ClassVar[OutcomeKind]
    op_ref: str


# JSON-RPC error codes that mean "the server serves this tool only as a task": -32021 in the
# final text, -32003 in older drafts (kept here, not in bridge._mcp.wire.shapes, so that reading a
# result never loads the SDK).
MISSING_CAPABILITY_CODES = frozenset({-32021, -32003})


@dataclass(frozen=True, slots=True)
class TaskHandle(CallOutcome):
    """The server created a task; the handle is committed to the ledger and being watched."""

    kind: ClassVar[OutcomeKind] = OutcomeKind.TASK_CREATED
    op_ref: str
    task: TaskView
    replayed: bool = False  # the operation id had already reached this outcome

    @property
    def task_ref(self) -> str:
        """The task's bridge reference."""
        return self.task.ref

    def _stored_result(self) -> Any:
        raise NoToolResult("the call became a task: its result arrives with task.terminal")


@dataclass(frozen=True, slots=True)
class InlineResult(CallOutcome):
    """The server answered with an ordinary ``CallToolResult`` (possibly ``isError``)."""

    kind: ClassVar[OutcomeKind] = OutcomeKind.RESULT
    op_ref: str
    result: Any
    truncated: bool = False
    replayed: bool = False

    @property
    def is_error(self) -> bool:
        """Whether the tool reported an error (``isError`` in its ``CallToolResult``)."""
        return bool(isinstance(self.result, dict) and self.result.get("isError"))

    def _stored_result(self) -> Any:
        return self.result


@dataclass(frozen=True, slots=True)
class RejectedCall(CallOutcome):
    """The server answered with a JSON-RPC error: the request itself was refused."""

    kind: ClassVar[OutcomeKind] = OutcomeKind.REJECTED
    op_ref: str
    error: Any
    replayed: bool = False

    @property
    def code(self) -> int | None:
        """The JSON-RPC error code, when the error carries one."""
        code = self.error.get("code") if isinstance(self.error, dict) else None
        return code if isinstance(code, int) else None

    @property
    def missing_tasks_capability(self) -> bool:
        """The server can serve this call only as a task (-32021; -32003 in older drafts)."""
        return self.code in MISSING_CAPABILITY_CODES

    def _stored_result(self) -> Any:
        raise NoToolResult(f"the server refused the call (JSON-RPC error {self.code})")


@dataclass(frozen=True, slots=True)
class UnknownOutcome(CallOutcome):
    """The request may have reached the server, but neither a handle nor a result came back.

    An ``call.unknown_outcome`` event was written. Nothing was retried unless the policy allowed
    it for a read-only or idempotent tool, or for a consequential one the host's admission check
    declared ``not_admitted`` (then ``retries`` holds what the retries returned).
    """

    kind: ClassVar[OutcomeKind] = OutcomeKind.UNKNOWN_OUTCOME
    op_ref: str
    reason: str
    retries: tuple[CallOutcome, ...] = ()
    replayed: bool = False
    # The server's Retry-After (429/503), capped: a policy-allowed retry waits this long first.
    retry_after_ms: int | None = None
    # What the host's admission check (or the host) said, when one was asked: see
    # bridge._mcp.calls.admission. None: nobody was asked.
    admission: Admission | None = None

    def _stored_result(self) -> Any:
        raise NoToolResult(f"the call's outcome is unknown ({self.reason})")


@dataclass(frozen=True, slots=True)
class InputPending(CallOutcome):
    """The server needs input before it does anything (MRTR: an ``InputRequiredResult`` to
    ``tools/call``, leg ``leg`` of the call). Nothing is in flight; the call is recorded
    ``input_required`` and one ``call.input_required`` event per input was written. Answer
    every input (``inputs[i].accept(...)``): the call is then sent
    again with the answers and the server's state, and the last answer's receipt carries
    what that leg returned. Still listed by ``Run.pending_inputs`` after a restart."""

    kind: ClassVar[OutcomeKind] = OutcomeKind.INPUT_REQUIRED
    op_ref: str
    leg: int
    inputs: tuple[InputRequest, ...]
    replayed: bool = False

    def _stored_result(self) -> Any:
        raise NoToolResult(f"the call {self.op_ref} waits for input (leg {self.leg})")


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
        """Whether the server took the answer (acknowledged, or the call was sent again with it)."""
        return self.delivery in (AnswerDelivery.DELIVERED, AnswerDelivery.RETRIED)
