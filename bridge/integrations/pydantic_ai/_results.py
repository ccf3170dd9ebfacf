"""What the model sees for a bridged step: a pydantic-ai tool return value, or a failure it
reads (:class:`~pydantic_ai.exceptions.ToolFailed`) or may correct (``ModelRetry``).

Never a fabricated result: a lost task, an unknown outcome or a step that stopped waiting is
said to be exactly that, so the model does not take it for success or simply call again."""

from __future__ import annotations

import base64
from typing import Any

import mcp_types
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.messages import BinaryContent

from bridge._errors import NoToolResult
from bridge._outcomes import CallOutcome, InlineResult, RejectedCall, UnknownOutcome
from bridge._runtime.step_results import RecoverableFailure, TaskSettled

Failure = ToolFailed | ModelRetry


def settled_value(step: CallOutcome) -> Any:
    """The value (or the ``ToolFailed`` / ``ModelRetry`` instance) a settled step gives the
    model. A step that is still open (``TaskPending``, ``InputPending``) is not settled:
    ``ValueError``."""
    if isinstance(step, InlineResult | TaskSettled):
        try:
            return tool_return(step.to_call_tool_result())
        except NoToolResult as missing:  # e.g. a result larger than the ledger keeps
            return ToolFailed(f"the tool result is not available: {missing}")
    if isinstance(step, RecoverableFailure):
        return ToolFailed(
            f"the task is still running on the server, but this step stopped waiting for it "
            f"({step.reason}); its result is not available yet"
        )
    if isinstance(step, UnknownOutcome):
        return ToolFailed(
            f"it is unknown whether the server ran this call ({step.reason}); "
            "it was not repeated, because it may already have taken effect"
        )
    if isinstance(step, RejectedCall):
        message = step.error.get("message") if isinstance(step.error, dict) else None
        refused = f"the server refused the call (JSON-RPC error {step.code}): {message or ''}"
        # A refusal of the request itself (bad arguments) is the model's to correct.
        return ToolFailed(refused) if step.missing_tasks_capability else ModelRetry(refused)
    raise ValueError(f"{type(step).__name__} is not settled yet")


def tool_return(result: mcp_types.CallToolResult) -> Any:
    """An MCP ``CallToolResult`` as pydantic-ai returns it: structured content when there is
    some (unwrapped from the SDK's ``{"result": …}``), else the content items (text as ``str``,
    images and audio as ``BinaryContent``). An ``isError`` result is a ``ToolFailed``."""
    if result.is_error:
        text = _text(result) or "the tool returned an error"
        return ToolFailed(text)
    structured = result.structured_content
    if structured is not None:
        if len(structured) == 1 and "result" in structured:
            return structured["result"]
        return structured
    items = [_content_item(item) for item in result.content]
    return items[0] if len(items) == 1 else items


def _text(result: mcp_types.CallToolResult) -> str:
    return "".join(item.text for item in result.content if isinstance(item, mcp_types.TextContent))


def _content_item(item: mcp_types.ContentBlock) -> Any:
    if isinstance(item, mcp_types.TextContent):
        return item.text
    if isinstance(item, mcp_types.ImageContent | mcp_types.AudioContent):
        return BinaryContent(data=base64.b64decode(item.data), media_type=item.mime_type)
    return item.model_dump(mode="json", by_alias=True, exclude_none=True)
