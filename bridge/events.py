"""The typed events a run's log holds.

Every event is written by the ledger in the same transaction as the state change it reports,
with a per-run gapless ``seq`` starting at 1. Events carry bridge-local references
(``run_ref``, ``task_ref``, ``op_ref``) and never the raw MCP ``taskId`` or any credential.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from bridge._lifecycle import Admission, CallState, LostReason, OuterStatus, TaskStatus

# Why the bridge declined an input request, how a host's input handler failed, and what the
# input policy did then (the input-trust events, and the ledger writes that emit them).
DeclineReason = Literal["undeclared", "handler_failed", "task_lost"]
HandlerFailure = Literal["raised", "invalid_answer", "invalid_request"]
HandlerFailedAction = Literal["declined", "left_pending"]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = 0  # assigned by the ledger when the event is appended
    run_ref: str = ""
    at_ms: int = 0

    @property
    def is_final(self) -> bool:
        """A task's final event (``task.terminal`` or ``task.lost``): wait for either."""
        return isinstance(self, FINAL_TASK_EVENTS)


class _TaskEvent(_Event):
    task_ref: str
    tool: str
    server: str  # server name as the server reported it (or its endpoint when unnamed)


class RunRegistered(_Event):
    """A run was registered: an outer response this bridge serves or follows."""

    type: Literal["run.registered"] = "run.registered"
    uhp_server: str
    response_id: str | None
    session_id: str | None
    harness_id: str | None


class OuterIdsRecorded(_Event):
    """The outer response's UHP ids (``resp_…``, ``hsess…``) were recorded on the run."""

    type: Literal["outer.ids_recorded"] = "outer.ids_recorded"
    response_id: str
    session_id: str | None


class OuterStatusChanged(_Event):
    """The outer response's status changed, as its server or the serving harness reported it."""

    type: Literal["outer.status_changed"] = "outer.status_changed"
    previous: OuterStatus | None
    status: OuterStatus


class OuterTerminal(_Event):
    """The outer response ended; open tasks inside it are left to the outer-end policy."""

    type: Literal["outer.terminal"] = "outer.terminal"
    status: OuterStatus
    error: dict[str, Any] | None = None


class OuterStreamLost(_Event):
    """The outer run's event stream broke (dropped, stalled, gap, malformed frame)."""

    type: Literal["outer.stream_lost"] = "outer.stream_lost"
    reason: str
    last_sequence: int | None


class OuterFieldsIgnored(_Event):
    """The server named request fields it did not act on (``metadata.ignored_fields``): the
    response ran, but not with everything the request said."""

    type: Literal["outer.fields_ignored"] = "outer.fields_ignored"
    fields: list[str]


class OuterResumed(_Event):
    """Following the outer run again: by ``Last-Event-ID`` or by re-reading the response."""

    type: Literal["outer.resumed"] = "outer.resumed"
    mode: Literal["last_event_id", "reread"]
    after_sequence: int | None


class CallUnknownOutcome(_Event):
    """A call may have reached the server, but neither a handle nor a result came back: its outcome
    is unknown (never guessed)."""

    type: Literal["call.unknown_outcome"] = "call.unknown_outcome"
    op_ref: str
    tool: str
    server: str
    previous: CallState
    reason: str


class CallAdmissionChecked(_Event):
    """Whether a call whose outcome is unknown was admitted, as the host's admission check
    (``decided_by="hook"``) or the host itself (``"host"``) said. ``admitted``: taken without
    a handle reaching the bridge, never resent; ``not_admitted``: safe to send again (with the
    same operation id); ``unknown``: still open, only the host resolves it."""

    type: Literal["call.admission_checked"] = "call.admission_checked"
    op_ref: str
    tool: str
    server: str
    admission: Admission
    decided_by: Literal["hook", "host"]
    by: str = ""  # who gave the verdict (an operator's name, "console:<principal>", ...)


class CallResult(_Event):
    """A call was answered without a task: a ``CallToolResult`` (``is_error`` for ``isError``) or a
    JSON-RPC error (``rpc_error``)."""

    type: Literal["call.result"] = "call.result"
    op_ref: str
    tool: str
    server: str
    is_error: bool  # a CallToolResult with isError, or a JSON-RPC error reply
    rpc_error: bool = False  # the server answered with a JSON-RPC error (nothing was started)
    truncated: bool


class _CallInputEvent(_Event):
    """About one input request of an MRTR call (leg ``leg``; no task exists yet)."""

    op_ref: str
    tool: str
    server: str
    leg: int
    input_ref: str


class CallInputRequired(_CallInputEvent):
    """MRTR: the server answered ``tools/call`` with an ``InputRequiredResult`` before any task
    existed (leg ``leg`` of the call). Answer it as a task's input (``Bridge.input_request``);
    once every input of the leg is answered the call is sent again with the answers."""

    type: Literal["call.input_required"] = "call.input_required"
    method: str
    params: dict[str, Any]


class CallInputAnswered(_CallInputEvent):
    """An answer to an input request of a call (MRTR, before any task) was recorded."""

    type: Literal["call.input_answered"] = "call.input_answered"


class CallInputDeclined(_CallInputEvent):
    """The bridge declined an MRTR input under the input policy (``reason``: a kind the host
    never declared, or a handler that failed). ``answered``: an elicitation's
    ``{"action": "decline"}`` was recorded as the answer (the call goes out again once its leg
    is answered); false for a kind with no decline shape (sampling): nothing can be sent, so
    the request stays pending for the host (an MRTR call holds nothing on the server)."""

    type: Literal["call.input_declined"] = "call.input_declined"
    method: str
    reason: DeclineReason
    answered: bool


class CallInputHandlerFailed(_CallInputEvent):
    """The host's handler for an MRTR input raised, answered badly, or met a request it cannot
    parse. Nothing it returned was recorded or sent; ``action`` says what the policy did."""

    type: Literal["call.input_handler_failed"] = "call.input_handler_failed"
    method: str
    failure: HandlerFailure
    detail: str
    action: HandlerFailedAction


class TaskCreated(_TaskEvent):
    """A call created a task; its handle is committed and watched."""

    type: Literal["task.created"] = "task.created"
    op_ref: str
    status: TaskStatus
    ttl_ms: int | None
    poll_interval_ms: int | None


class TaskStatusChanged(_TaskEvent):
    """A poll or push observed a new status of a task."""

    type: Literal["task.status_changed"] = "task.status_changed"
    previous: TaskStatus
    status: TaskStatus
    status_message: str | None = None


class TaskInputRequired(_TaskEvent):
    """An input request for the host to answer under its own elicitation/sampling policy.

    Named by ``input_ref``: the server's key may embed the raw task id, so it stays in the ledger.
    """

    type: Literal["task.input_required"] = "task.input_required"
    input_ref: str
    method: str
    params: dict[str, Any]


class TaskInputAnswered(_TaskEvent):
    """An answer to one of a task's input requests was recorded (sent with ``tasks/update``)."""

    type: Literal["task.input_answered"] = "task.input_answered"
    input_ref: str


class TaskInputAnswerRefused(_TaskEvent):
    """The server refused the ``tasks/update`` carrying an answer (a JSON-RPC error). The
    refused answer is dropped, never resent (not by recovery either), and the request is
    answerable again: a corrected answer is recorded and sent once. ``reason``: the server's
    code and message, raw task id scrubbed."""

    type: Literal["task.input_answer_refused"] = "task.input_answer_refused"
    input_ref: str
    reason: str


class TaskInputDeclined(_TaskEvent):
    """The bridge declined an input request under the input policy (``reason``: a kind the host
    never declared, or a handler that failed). ``answered``: an elicitation's
    ``{"action": "decline"}`` was recorded (and is sent with ``tasks/update``); false for a
    kind with no decline shape (sampling): nothing is sent and the request is not offered to the
    host any more."""

    type: Literal["task.input_declined"] = "task.input_declined"
    input_ref: str
    method: str
    reason: DeclineReason
    answered: bool


class TaskInputHandlerFailed(_TaskEvent):
    """The host's handler for an input request raised, returned an answer that fails the
    request's schema or shape, or met a request it cannot parse. Nothing it returned was
    recorded or sent; ``action`` says what the input policy did instead."""

    type: Literal["task.input_handler_failed"] = "task.input_handler_failed"
    input_ref: str
    method: str
    failure: HandlerFailure
    detail: str
    action: HandlerFailedAction


class TaskInputStuck(_TaskEvent):
    """The task stayed ``input_required`` with these requests unanswered past the input
    policy's deadline. ``cancel``: the policy asks for ``tasks/cancel`` next (its own
    ``task.cancel_requested`` follows, requested by ``policy:input_stuck``)."""

    type: Literal["task.input_stuck"] = "task.input_stuck"
    input_refs: list[str]
    polls: int
    waited_ms: int
    cancel: bool


class TaskCancelRequested(_TaskEvent):
    """A ``tasks/cancel`` was recorded as intent (by the host, a policy or an operator); only the
    task's status says whether it stopped."""

    type: Literal["task.cancel_requested"] = "task.cancel_requested"
    requested_by: str  # "host", "policy:<name>", "operator"


class TaskDetached(_TaskEvent):
    """The bridge stopped watching a task on request; the task itself is left as it is."""

    type: Literal["task.detached"] = "task.detached"
    requested_by: str


class StepRecoverableFailure(_TaskEvent):
    """The outer step gave up waiting for the task (deadline, or a ``fail_recoverable``
    policy). The handle is kept and still watched: the step can be retried or resumed."""

    type: Literal["step.recoverable_failure"] = "step.recoverable_failure"
    reason: str


class OuterOpenTasks(_Event):
    """The outer run ended with inner tasks still open (``on_outer_end="report"``)."""

    type: Literal["outer.open_tasks"] = "outer.open_tasks"
    status: OuterStatus
    task_refs: list[str]
    action: Literal["reported", "cancel_requested"]


class ServerUnreachable(_TaskEvent):
    """The task's server has not answered for longer than the grace period: not (yet) lost."""

    type: Literal["server.unreachable"] = "server.unreachable"
    since_ms: int
    detail: str


class TaskLost(_TaskEvent):
    """The bridge can no longer learn the task's outcome (TTL passed, ``-32602``, server gone): it
    is unknown."""

    type: Literal["task.lost"] = "task.lost"
    reason: LostReason
    detail: str = ""


class TaskTerminal(_TaskEvent):
    """The task reached a terminal status; its outcome is stored. ``superseded_lost``: the task
    had been declared lost (a ``task.lost`` came first) and a later poll saw it end after all;
    this outcome replaces that verdict."""

    type: Literal["task.terminal"] = "task.terminal"
    status: TaskStatus
    superseded_lost: bool = False
    result: Any = None  # the stored CallToolResult (or its truncation marker)
    error: Any = None  # the stored JSON-RPC error object (or its truncation marker)
    truncated: bool = False


class Anomaly(_Event):
    """Something a peer did that the bridge refused and recorded (a status regression, a reused
    input key, a malformed reply...); nothing already recorded changed."""

    type: Literal["anomaly"] = "anomaly"
    kind: str  # "status_regression", "reused_input_key", "malformed_reply", ...
    detail: str
    task_ref: str | None = None
    op_ref: str | None = None


class OperatorAcknowledged(_Event):
    """An operator acknowledged a lost task or an anomaly: it leaves the attention list.
    Nothing else changes (a lost task stays lost; an anomaly stays on record)."""

    type: Literal["operator.acknowledged"] = "operator.acknowledged"
    subject: Literal["lost_task", "anomaly"]
    task_ref: str | None = None  # the lost task
    anomaly_seq: int | None = None  # the anomaly event's seq on this run
    by: str
    note: str = ""


class OuterClosedByOperator(_Event):
    """An operator ended a served run nobody reports on any more (an orphaned run), with a
    stated status and reason. Its inner tasks are left exactly as they are (two lifecycles)."""

    type: Literal["outer.closed_by_operator"] = "outer.closed_by_operator"
    status: OuterStatus
    reason: str
    by: str
    open_task_refs: list[str]  # still open, and still watched


BridgeEvent = Annotated[
    RunRegistered
    | OuterIdsRecorded
    | OuterStatusChanged
    | OuterTerminal
    | OuterStreamLost
    | OuterResumed
    | OuterFieldsIgnored
    | CallUnknownOutcome
    | CallAdmissionChecked
    | CallResult
    | CallInputRequired
    | CallInputAnswered
    | CallInputDeclined
    | CallInputHandlerFailed
    | TaskCreated
    | TaskStatusChanged
    | TaskInputRequired
    | TaskInputAnswered
    | TaskInputAnswerRefused
    | TaskInputDeclined
    | TaskInputHandlerFailed
    | TaskInputStuck
    | TaskCancelRequested
    | TaskDetached
    | StepRecoverableFailure
    | OuterOpenTasks
    | ServerUnreachable
    | TaskLost
    | TaskTerminal
    | Anomaly
    | OperatorAcknowledged
    | OuterClosedByOperator,
    Field(discriminator="type"),
]

# A task's final events: after either one, nothing more is needed for that handle (a later
# task.terminal with superseded_lost=True may still correct a lost verdict).
FINAL_TASK_EVENTS: tuple[type[TaskTerminal], type[TaskLost]] = (TaskTerminal, TaskLost)

# Events about one task handle (they all carry task_ref, tool and server).
TaskEventLike = _TaskEvent

# An input request for the host, of a task or of a call that has no task yet (MRTR).
InputRequiredEvent = TaskInputRequired | CallInputRequired

EVENT_ADAPTER: TypeAdapter[BridgeEvent] = TypeAdapter(BridgeEvent)


def parse_event(data: str | bytes) -> BridgeEvent:
    return EVENT_ADAPTER.validate_json(data)
