"""Reading a step's MCP tool result: its text, or the SDK's ``CallToolResult``.

Shared by every step result (``_outcomes``, ``_runtime.step_results``): each says
what it holds through ``_stored_result`` (the stored ``CallToolResult`` as JSON, or
:class:`~bridge.errors.NoToolResult` saying why there is none).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from bridge._errors import NoToolResult
from bridge._ledger.outcome import is_truncation_marker

if TYPE_CHECKING:
    import mcp_types


class ToolResultAccess(ABC):
    """``text()`` and ``to_call_tool_result()`` over ``_stored_result()``."""

    __slots__ = ()

    @abstractmethod
    def _stored_result(self) -> Any:
        """The stored ``CallToolResult`` as JSON, or raise ``NoToolResult`` saying why not."""

    def text(self) -> str:
        """The concatenated text content of the tool result (``isError`` results included).

        Raises :class:`~bridge.errors.NoToolResult` when the step holds no tool result.
        """
        result = call_tool_result(self._stored_result())
        return "".join(item.text for item in result.content if item.type == "text")

    def to_call_tool_result(self) -> mcp_types.CallToolResult:
        """The tool result as the MCP SDK's type (for frameworks that want it)."""
        return call_tool_result(self._stored_result())


def call_tool_result(stored: Any) -> mcp_types.CallToolResult:
    """Validate a stored ``CallToolResult`` (a JSON dict) into the SDK model."""
    import mcp_types  # the SDK loads only when a result is read (``import bridge`` stays light)

    if is_truncation_marker(stored):
        raise NoToolResult("the tool result was larger than the ledger keeps (truncated)")
    if not isinstance(stored, dict):
        raise NoToolResult("the stored result is not a CallToolResult")
    return mcp_types.CallToolResult.model_validate(stored)


def error_result(message: str) -> mcp_types.CallToolResult:
    """An ``isError`` result carrying one text item (a step that ended without a result)."""
    import mcp_types

    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=message)], is_error=True
    )
