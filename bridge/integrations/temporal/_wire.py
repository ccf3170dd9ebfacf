"""The bridge's activity inputs and results as plain JSON objects, built and read by hand.

Temporal's default converter turns a dataclass into JSON with ``dataclasses.asdict`` and back
by resolving its type hints, field by field, on every payload; inside the workflow sandbox,
where every builtin call goes through the sandbox's wrappers, that was most of what a bridged
call cost the worker beyond the plain activity. The activities take and return
``dict[str, Any]`` instead, in exactly the shape ``asdict`` wrote, so histories recorded before
replay the same. The dataclasses of ``_values`` stay what the workflow code handles.
"""

from typing import Any

from bridge.integrations.temporal._values import (
    AnswerRequest,
    CallObservation,
    CallWatchRequest,
    Observation,
    OutcomeKind,
    PendingInput,
    Started,
    TaskRefs,
    ToolCall,
    ToolOutcome,
    WatchRequest,
)

Json = dict[str, Any]


def call_json(call: ToolCall) -> Json:
    return {
        "workflow_id": call.workflow_id,
        "server": call.server,
        "tool": call.tool,
        "arguments": call.arguments,
        "operation_id": call.operation_id,
    }


def call_of(data: Json) -> ToolCall:
    return ToolCall(
        data["workflow_id"], data["server"], data["tool"], data["arguments"], data["operation_id"]
    )


def refs_json(refs: TaskRefs) -> Json:
    return {
        "run_ref": refs.run_ref,
        "op_ref": refs.op_ref,
        "task_ref": refs.task_ref,
        "poll_interval_ms": refs.poll_interval_ms,
    }


def refs_of(data: Json) -> TaskRefs:
    return TaskRefs(data["run_ref"], data["op_ref"], data["task_ref"], data["poll_interval_ms"])


def outcome_json(outcome: ToolOutcome) -> Json:
    return {
        "kind": outcome.kind.value,
        "op_ref": outcome.op_ref,
        "task_ref": outcome.task_ref,
        "is_error": outcome.is_error,
        "result": outcome.result,
        "text": outcome.text,
        "detail": outcome.detail,
    }


def outcome_of(data: Json) -> ToolOutcome:
    return ToolOutcome(
        OutcomeKind(data["kind"]),
        data["op_ref"],
        data.get("task_ref"),
        bool(data.get("is_error")),
        data.get("result"),
        data.get("text"),
        data.get("detail"),
    )


def started_json(started: Started) -> Json:
    handle, outcome = started.handle, started.outcome
    data: Json = {
        "handle": None if handle is None else refs_json(handle),
        "outcome": None if outcome is None else outcome_json(outcome),
    }
    if started.asked:  # only then: a start without MRTR is recorded as it always was
        data["asked"] = [pending_json(p) for p in started.asked]
    return data


def started_of(data: Json) -> Started:
    handle, outcome = data.get("handle"), data.get("outcome")
    return Started(
        None if handle is None else refs_of(handle),
        None if outcome is None else outcome_of(outcome),
        [pending_of(p) for p in data.get("asked") or []],
    )


def pending_json(pending: PendingInput) -> Json:
    data: Json = {
        "input_ref": pending.input_ref,
        "task_ref": pending.task_ref,
        "method": pending.method,
        "message": pending.message,
        "requested_schema": pending.requested_schema,
    }
    if pending.op_ref is not None:
        data["op_ref"] = pending.op_ref
    return data


def pending_of(data: Json) -> PendingInput:
    return PendingInput(
        data["input_ref"],
        data.get("task_ref"),
        data["method"],
        data.get("message"),
        data.get("requested_schema"),
        data.get("op_ref"),
    )


def call_watch_json(request: CallWatchRequest) -> Json:
    return {
        "call": call_json(request.call),
        "op_ref": request.op_ref,
        "asked": list(request.asked),
        "waiting": list(request.waiting),
    }


def call_watch_of(data: Json) -> CallWatchRequest:
    return CallWatchRequest(
        call_of(data["call"]), data["op_ref"], list(data["asked"]), list(data["waiting"])
    )


def call_observation_json(seen: CallObservation) -> Json:
    started = seen.started
    return {
        "answered": seen.answered,
        "started": None if started is None else started_json(started),
    }


def call_observation_of(data: Json) -> CallObservation:
    started = data.get("started")
    return CallObservation(data.get("answered"), None if started is None else started_of(started))


def watch_json(request: WatchRequest) -> Json:
    return {
        "call": call_json(request.call),
        "handle": refs_json(request.handle),
        "waiting": list(request.waiting),
        "seen": list(request.seen),
    }


def watch_of(data: Json) -> WatchRequest:
    return WatchRequest(
        call_of(data["call"]), refs_of(data["handle"]), list(data["waiting"]), list(data["seen"])
    )


def observation_json(seen: Observation) -> Json:
    settled, asked = seen.settled, seen.asked
    return {
        "settled": None if settled is None else outcome_json(settled),
        "asked": None if asked is None else pending_json(asked),
        "answered": seen.answered,
    }


def observation_of(data: Json) -> Observation:
    settled, asked = data.get("settled"), data.get("asked")
    return Observation(
        None if settled is None else outcome_of(settled),
        None if asked is None else pending_of(asked),
        data.get("answered"),
    )


def answer_json(request: AnswerRequest) -> Json:
    handle = request.handle
    data: Json = {
        "call": call_json(request.call),
        "handle": None if handle is None else refs_json(handle),
        "input_ref": request.input_ref,
        "answer": request.answer,
    }
    if request.op_ref is not None:
        data["op_ref"] = request.op_ref
    return data


def answer_of(data: Json) -> AnswerRequest:
    handle = data.get("handle")
    return AnswerRequest(
        call_of(data["call"]),
        None if handle is None else refs_of(handle),
        data["input_ref"],
        data["answer"],
        data.get("op_ref"),
    )
