"""What a bridged LangGraph tool hands the graph: interrupt payloads (JSON-friendly dicts, so
any checkpointer stores them), the resume values it understands, and its ``ToolMessage``."""

from __future__ import annotations

import json
from typing import Any, Literal, TypedDict

from langchain_core.messages import ToolMessage

from bridge._errors import NoToolResult
from bridge._outcomes import CallOutcome, InputRequest

PARKED_TASK = "bridge.task"
ASKED_INPUT = "bridge.input"
LOOK_AGAIN = "bridge.look_again"


class ParkedTask(TypedDict):
    """Interrupt payload: the call became a task that is still running (``detach``).

    Resume (after :func:`~bridge.integrations.langgraph.when_settled`) with any value: the
    tool reads the task's fate from the ledger, never from the resume value."""

    kind: Literal["bridge.task"]
    run_ref: str
    tool_call_id: str
    server: str
    tool: str
    operation_id: str
    task_ref: str


class AskedInput(TypedDict):
    """Interrupt payload: the server asks for input (an approval form, …) — of a task, or of
    the call before any task (MRTR: ``task_ref`` is ``None``, ``op_ref`` is set).

    Resume with :func:`~bridge.integrations.langgraph.answer` (the tool answers through the
    typed :class:`~bridge.InputRequest`), or answer the request yourself and resume with
    anything. ``note`` says why an earlier answer was not taken."""

    kind: Literal["bridge.input"]
    run_ref: str
    tool_call_id: str
    server: str
    tool: str
    operation_id: str
    input_ref: str
    task_ref: str | None
    op_ref: str | None
    method: str
    message: str | None
    requested_schema: dict[str, Any] | None
    note: str | None


class InputAnswer(TypedDict):
    """Resume value answering one :class:`AskedInput` (the MCP elicitation result shape)."""

    kind: Literal["bridge.answer"]
    input_ref: str
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None


BridgeInterrupt = ParkedTask | AskedInput


def answer(
    asked: AskedInput,
    action: Literal["accept", "decline", "cancel"] = "accept",
    content: dict[str, Any] | None = None,
) -> InputAnswer:
    """The resume value answering ``asked``: ``Command(resume=answer(asked, "accept", {...}))``."""
    return {
        "kind": "bridge.answer",
        "input_ref": asked["input_ref"],
        "action": action,
        "content": content,
    }


def asked_input(base: dict[str, str], request: InputRequest, note: str | None) -> AskedInput:
    return {
        "kind": "bridge.input",
        "run_ref": base["run_ref"],
        "tool_call_id": base["tool_call_id"],
        "server": base["server"],
        "tool": base["tool"],
        "operation_id": base["operation_id"],
        "input_ref": request.input_ref,
        "task_ref": request.task_ref,
        "op_ref": request.op_ref,
        "method": request.method,
        "message": request.message,
        "requested_schema": request.requested_schema,
        "note": note,
    }


def parked_task(base: dict[str, str], task_ref: str) -> ParkedTask:
    return {
        "kind": "bridge.task",
        "run_ref": base["run_ref"],
        "tool_call_id": base["tool_call_id"],
        "server": base["server"],
        "tool": base["tool"],
        "operation_id": base["operation_id"],
        "task_ref": task_ref,
    }


def tool_message(outcome: CallOutcome, tool_call_id: str, tool: str) -> ToolMessage:
    """The step's tool result as the model sees it: the text content (other content as JSON),
    ``status="error"`` for an ``isError`` result or a step without one (a lost task, an
    unknown outcome, a deadline): its reason is the content, never an invented result."""
    try:
        result = outcome.to_call_tool_result()
    except NoToolResult as missing:
        return ToolMessage(str(missing), tool_call_id=tool_call_id, name=tool, status="error")
    parts = [
        item.text
        if item.type == "text"
        else json.dumps(item.model_dump(mode="json", by_alias=True, exclude_none=True))
        for item in result.content
    ]
    return ToolMessage(
        "\n".join(parts),
        tool_call_id=tool_call_id,
        name=tool,
        status="error" if result.is_error else "success",
        artifact=result.structured_content,
    )
