"""The gateway's MCP server: the official SDK's lowlevel ``Server`` with ``tools/list``,
``tools/call`` and the Tasks extension's ``tasks/get`` / ``tasks/update`` / ``tasks/cancel``
(no ``tasks/list``: a handle is found only by whoever holds it)."""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from bridge.gateway.auth import GatewayTokens
from bridge.gateway.calls import OPERATION_ID_META_KEY, GatewayCalls
from bridge.gateway.client_channel import client_channel
from bridge.mcp.wire import TASKS_EXTENSION, TaskIdParams, UpdateTaskParams

DEFAULT_SESSION = "default"


def _principal(ctx: ServerRequestContext[Any, Any], tokens: GatewayTokens) -> str:
    # The HTTP layer already refused unknown tokens; this maps the same header to its principal.
    request = ctx.request
    header = request.headers.get("authorization") if request is not None else None
    principal = tokens.principal(header)
    if principal is None:
        raise MCPError(code=mcp_types.INVALID_REQUEST, message="not authenticated")
    return principal


def _session(ctx: ServerRequestContext[Any, Any]) -> str:
    request = ctx.request
    session = request.headers.get("mcp-session-id") if request is not None else None
    return str(session) if session else DEFAULT_SESSION


def _declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    declared = capabilities.extensions if capabilities is not None else None
    return bool(declared) and TASKS_EXTENSION in (declared or {})


def _operation_id(params: mcp_types.CallToolRequestParams) -> str | None:
    meta: Any = params.meta or {}
    value = meta.get(OPERATION_ID_META_KEY) if isinstance(meta, dict) else None
    if value is not None and (not isinstance(value, str) or not value or len(value) > 200):
        raise MCPError(
            code=mcp_types.INVALID_PARAMS,
            message=f"_meta {OPERATION_ID_META_KEY!r} must be a non-empty string (<= 200 chars)",
        )
    return value


def build_server(calls: GatewayCalls, tokens: GatewayTokens) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=await calls.list_tools(_principal(ctx, tokens)))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
    ) -> HandlerResult:
        principal = _principal(ctx, tokens)
        arguments = dict(params.arguments or {})
        op_id = _operation_id(params)
        if _declares_tasks(ctx):
            return await calls.call_with_task(
                principal, _session(ctx), params.name, arguments, op_id
            )
        channel = client_channel(ctx, params)
        return await calls.call_and_wait(
            principal, _session(ctx), params.name, arguments, op_id, channel
        )

    async def get_task(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        return {
            "resultType": "complete",
            **await calls.get_task(_principal(ctx, tokens), params.task_id),
        }

    async def update_task(
        ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> HandlerResult:
        await calls.update_task(_principal(ctx, tokens), params.task_id, params.input_responses)
        return {"resultType": "complete"}

    async def cancel_task(
        ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        await calls.cancel_task(_principal(ctx, tokens), params.task_id)
        return {"resultType": "complete"}

    server: Server[Any] = Server("uhp-bridge-gateway", version="0.1.0", on_list_tools=list_tools)
    server.add_request_handler("tools/call", mcp_types.CallToolRequestParams, call_tool)
    server.add_request_handler("tasks/get", TaskIdParams, get_task)
    server.add_request_handler("tasks/update", UpdateTaskParams, update_task)
    server.add_request_handler("tasks/cancel", TaskIdParams, cancel_task)
    server.extensions = {TASKS_EXTENSION: {}}
    return server
