"""How a bridged tool call reads in the step's ``function_call_output``: the bridge's outcome,
or the server's misbehaviour on that one call (the run goes on either way)."""

from __future__ import annotations

from typing import Any

from bridge import (
    InlineResult,
    RecoverableFailure,
    RejectedCall,
    TaskPending,
    TaskSettled,
    UnknownOutcome,
)
from bridge.errors import DuplicateTaskHandle, InvalidTaskResponse, MalformedTaskHandle

#: Tool trouble reported as the step's output (not as a failed response); the most specific
#: kind first, so a subclass is reported as itself.
TOOL_TROUBLE: dict[type[Exception], str] = {
    MalformedTaskHandle: "malformed_task_handle",
    InvalidTaskResponse: "invalid_task_response",
    DuplicateTaskHandle: "duplicate_task_handle",
}
TOOL_TROUBLE_TEXT = {
    "invalid_task_response": "The MCP server answered with something the Tasks protocol "
    "forbids; the call's outcome is unknown and it was not retried.",
    "duplicate_task_handle": "The MCP server returned a task handle it had already given "
    "for another call; this call's outcome is unknown and it was not retried.",
    "malformed_task_handle": "The MCP server returned a task handle that is empty, oversized, "
    "not printable or already given for another call; this call's outcome is unknown and it "
    "was not retried.",
}


def tool_trouble(exc: InvalidTaskResponse | DuplicateTaskHandle) -> dict[str, Any]:
    """The output of a call the server answered unacceptably: the kind and a fixed text (the
    exception's own text may quote the server), never a raw id."""
    kind = next(name for kind_of, name in TOOL_TROUBLE.items() if isinstance(exc, kind_of))
    return {"outcome": "error", "error": {"kind": kind, "message": TOOL_TROUBLE_TEXT[kind]}}


def describe(outcome: Any) -> dict[str, Any]:
    match outcome:
        case InlineResult():
            return {"outcome": "result", "is_error": outcome.is_error, "result": outcome.result}
        case TaskSettled():
            return {
                "outcome": "task_lost" if outcome.lost else "task_settled",
                "task_ref": outcome.task.ref,
                "status": outcome.status.value,
                "result": outcome.task.result,
                "error": outcome.task.error,
            }
        case TaskPending():
            return {"outcome": "task_pending", "task_ref": outcome.task.ref}
        case RecoverableFailure():
            return {
                "outcome": "step_failed_recoverably",
                "task_ref": outcome.task.ref,
                "reason": outcome.reason,
            }
        case RejectedCall():
            return {"outcome": "rejected", "error": outcome.error}
        case UnknownOutcome():
            return {"outcome": "unknown_outcome", "reason": outcome.reason}
    return {"outcome": type(outcome).__name__}
