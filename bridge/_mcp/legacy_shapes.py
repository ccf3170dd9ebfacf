"""The 2025-11-25 experimental tasks on the wire: ``params.task``, ``tasks/get``,
``tasks/result``, ``tasks/cancel`` (never ``tasks/list``: it lists by session, not by handle).

Replies are mapped onto the shapes the rest of the bridge already handles (the flat
``CreateTaskResult`` and ``DetailedTask`` (``shapes``);
``ttl``/``pollInterval`` become ``ttlMs``/``pollIntervalMs``), so the ledger, the scheduler
and the events are the same for both generations.

``tasks/result`` blocks on a live task, so it is sent only after ``tasks/get`` reported a
terminal status, when the server answers it at once: the scheduler never parks on it. Its reply
is what the call would have returned (a ``CallToolResult`` or the call's JSON-RPC error). The
``io.modelcontextprotocol/related-task`` entry of its ``_meta`` (the raw task id) is dropped
before anything is stored. A cancelled task's result is not fetched: the status is the outcome.

``input_required``: the questions arrive only as server-to-client requests on a ``tasks/result``
held open until the task ends; :mod:`bridge._mcp.inputs.legacy_held_result` holds it (in the
background, never in a poll) with :func:`await_outcome`, and hands its reply to :func:`fetch_task`.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

import mcp_types
from mcp import MCPError
from pydantic import ConfigDict, TypeAdapter, ValidationError

from bridge._errors import ServerConnectFailed
from bridge._ledger.reads.views import TaskView
from bridge._mcp.servers import ServerConnection
from bridge._mcp.wire import sdk_compat
from bridge._mcp.wire.shapes import INVALID_PARAMS, TRANSPORT_CODES, CreateTaskResult, DetailedTask

RELATED_TASK_META = "io.modelcontextprotocol/related-task"
# The lifetime asked for in params.task; the server may grant less (it reports what it keeps).
REQUESTED_TTL_MS = 3_600_000
_TASK_TOOLS = frozenset({"optional", "required"})
# What tasks/result answered: the call's result, or the call's JSON-RPC error.
Outcome = tuple[dict[str, Any] | None, dict[str, Any] | None]
_FETCH_RESULT = frozenset({"completed", "failed"})

_CALL_REPLY: TypeAdapter[mcp_types.CreateTaskResult | mcp_types.CallToolResult] = TypeAdapter(
    mcp_types.CreateTaskResult | mcp_types.CallToolResult
)
# taskSupport per tool name, per connection (refreshed when a tool is not in it).
_task_support: WeakKeyDictionary[ServerConnection, dict[str, str | None]] = WeakKeyDictionary()


class TaskPayload(mcp_types.Result):
    """A ``tasks/result`` reply: the original request's result, kept whole (a failed task's
    payload may carry no ``content`` at all)."""

    model_config = ConfigDict(extra="allow")


async def call_tool(
    connection: ServerConnection,
    session: Any,
    tool: str,
    arguments: dict[str, Any],
    *,
    meta: dict[str, str] | None = None,
) -> CreateTaskResult | mcp_types.CallToolResult:
    """``tools/call``, augmented with ``params.task`` when the tool's ``taskSupport`` allows
    it (the spec forbids it otherwise); a task reply comes back as the flat shape."""
    timeout = connection.config.request_timeout_s
    if not await _takes_tasks(connection, tool):
        reply: mcp_types.CallToolResult = await session.call_tool(
            tool, arguments, read_timeout_seconds=timeout, meta=meta
        )
        return reply
    params = mcp_types.CallToolRequestParams(
        name=tool,
        arguments=arguments,
        task=mcp_types.TaskMetadata(ttl=REQUESTED_TTL_MS),
        meta=meta,
    )
    request = mcp_types.CallToolRequest(params=params)
    raw = await _send_unchecked(session, request, timeout)
    parsed = _CALL_REPLY.validate_python(raw, by_name=False)
    if isinstance(parsed, mcp_types.CallToolResult):
        return parsed  # the server chose to answer at once
    task = parsed.task
    return CreateTaskResult(
        result_type="task",
        task_id=task.task_id,
        status=task.status,
        created_at=task.created_at,
        last_updated_at=task.last_updated_at,
        ttl_ms=task.ttl,
        poll_interval_ms=task.poll_interval,
        status_message=task.status_message,
    )


async def fetch_task(
    connection: ServerConnection, task: TaskView, *, outcome: Outcome | None = None
) -> DetailedTask:
    """``tasks/get``; once it says ``completed`` or ``failed``, ``tasks/result`` for the outcome
    (unless ``outcome``, what a held ``tasks/result`` already answered, is given).

    A failure of either propagates as it is (``-32602``: the handle is gone; no answer: poll
    again later), so a terminal status is never recorded without its outcome.
    """
    session = await connection.session()
    timeout = connection.config.request_timeout_s
    status: mcp_types.GetTaskResult = await session.send_request(
        mcp_types.GetTaskRequest(params=mcp_types.GetTaskRequestParams(task_id=task.task_id)),
        mcp_types.GetTaskResult,
        request_read_timeout_seconds=timeout,
    )
    result = error = None
    if status.status in _FETCH_RESULT and status.task_id == task.task_id:
        if outcome is None:
            outcome = await _fetch_outcome(session, task, timeout)
        result, error = outcome
    return DetailedTask(
        task_id=status.task_id,
        status=status.status,
        status_message=status.status_message,
        created_at=status.created_at,
        last_updated_at=status.last_updated_at,
        ttl_ms=status.ttl,
        poll_interval_ms=status.poll_interval,
        result=result,
        error=error,
    )


async def cancel_task(connection: ServerConnection, task: TaskView) -> None:
    """``tasks/cancel``; its reply (the task after the attempt) is intent, like any ack."""
    session = await connection.session()
    await session.send_request(
        mcp_types.CancelTaskRequest(params=mcp_types.CancelTaskRequestParams(task_id=task.task_id)),
        TaskPayload,
        request_read_timeout_seconds=connection.config.request_timeout_s,
    )


async def await_outcome(connection: ServerConnection, task: TaskView, timeout_s: float) -> Outcome:
    """``tasks/result`` on a live task: the server blocks it until the task ends, and sends its
    requests for input on its stream meanwhile. Errors propagate as in :func:`fetch_task`."""
    return await _fetch_outcome(await connection.session(), task, timeout_s)


async def _fetch_outcome(session: Any, task: TaskView, timeout: float) -> Outcome:
    request = mcp_types.GetTaskPayloadRequest(
        params=mcp_types.GetTaskPayloadRequestParams(task_id=task.task_id)
    )
    try:
        payload = await session.send_request(
            request, TaskPayload, request_read_timeout_seconds=timeout
        )
    except MCPError as exc:
        if exc.code == INVALID_PARAMS or exc.code in TRANSPORT_CODES:
            raise  # the handle is gone, or no answer: not the call's outcome
        error: dict[str, Any] = {"code": exc.code, "message": exc.message}
        if exc.data is not None:
            error["data"] = exc.data
        return None, error  # what the call itself answered
    result: dict[str, Any] = payload.model_dump(by_alias=True, mode="json", exclude_none=True)
    meta = result.get("_meta")
    if isinstance(meta, dict):
        meta.pop(RELATED_TASK_META, None)  # the raw task id, never stored
        if not meta:
            del result["_meta"]
    return result, None


async def learn_task_support(connection: ServerConnection, tool: str) -> None:
    """Know ``tool``'s ``taskSupport`` before the call is recorded (``tools/list`` once per
    connection, again for a tool it did not list). A failure raises
    :class:`~bridge.errors.ServerConnectFailed`: nothing was recorded or sent."""
    known = _task_support.get(connection)
    if known is not None and tool in known:
        return
    try:
        tools = await connection.list_tools()
    except Exception as exc:
        detail = f"tools/list for taskSupport failed: {type(exc).__name__}"
        raise ServerConnectFailed(connection.config.name, detail) from exc
    _task_support[connection] = {
        item.name: item.execution.task_support if item.execution is not None else None
        for item in tools
    }


async def _takes_tasks(connection: ServerConnection, tool: str) -> bool:
    await learn_task_support(connection, tool)  # normally known already: no request
    return _task_support[connection].get(tool) in _TASK_TOOLS


async def _send_unchecked(
    session: Any, request: mcp_types.Request[Any, Any], timeout: float
) -> Any:
    """Send ``request`` and return the raw result, without the SDK's per-method result check.

    SDK 2.3 validates a ``tools/call`` reply at 2025-11-25 as a ``CallToolResult`` only, so a
    ``CreateTaskResult`` (what a task-augmented call returns in that revision) would be
    refused; the caller validates the raw reply against both shapes itself. This mirrors
    ``ClientSession.send_request`` (same stamp: ``MCP-Protocol-Version``, same dispatcher,
    same errors) minus that one check, through :mod:`bridge._mcp.wire.sdk_compat`.

    Without those SDK parts, the public ``send_request`` sends the same request, and a reply
    its check refuses is read back from the refusal: pydantic's error carries the reply it
    was given. Its limit: only a reply refused as a whole (a ``CreateTaskResult`` lacks the
    ``content`` a ``CallToolResult`` requires) is recovered; any other refusal propagates.
    """
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    send = sdk_compat.unchecked_send(session)
    if not isinstance(send, str):
        return await send.send(data, timeout)
    sdk_compat.fell_back(sdk_compat.UNCHECKED_SEND, send)
    try:
        reply = await session.send_request(
            request, mcp_types.CallToolResult, request_read_timeout_seconds=timeout
        )
    except ValidationError as refused:
        given = [error.get("input") for error in refused.errors() if len(error["loc"]) == 1]
        if given and isinstance(given[0], dict) and "task" in given[0]:
            return given[0]  # the reply the check refused: the caller validates it
        raise
    return reply.model_dump(by_alias=True, mode="json", exclude_none=True)
