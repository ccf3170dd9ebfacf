"""The gateway's MCP server: the official SDK's lowlevel ``Server`` with ``tools/list``,
``tools/call`` and the Tasks extension's ``tasks/get`` / ``tasks/update`` / ``tasks/cancel``
(no ``tasks/list``: a handle is found only by whoever holds it).

Over HTTP the principal is the bearer token's; over stdio (no headers) it is fixed when the
server is built (``fixed_principal``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bridge._mcp.wire.shapes import TASKS_EXTENSION, TaskIdParams, UpdateTaskParams
from bridge.gateway._auth import GatewayTokens
from bridge.gateway._calls import GatewayCall, GatewayCalls
from bridge.gateway._client_channel import client_channel, set_logging_level
from bridge.gateway._identity import operation_id, outer_identity

DEFAULT_SESSION = "default"


def _headers(ctx: ServerRequestContext[Any, Any]) -> Any:
    request = ctx.request
    return request.headers if request is not None else None  # None: stdio


def _principal_of(
    tokens: GatewayTokens, fixed_principal: str | None
) -> Callable[[ServerRequestContext[Any, Any]], str]:
    def principal(ctx: ServerRequestContext[Any, Any]) -> str:
        if fixed_principal is not None:
            return fixed_principal
        # The HTTP layer already refused unknown tokens; this maps the same header to its
        # principal.
        headers = _headers(ctx)
        found = tokens.principal(headers.get("authorization") if headers is not None else None)
        if found is None:
            raise MCPError(code=mcp_types.INVALID_REQUEST, message="not authenticated")
        return found

    return principal


def _session(ctx: ServerRequestContext[Any, Any]) -> str:
    request = ctx.request
    session = request.headers.get("mcp-session-id") if request is not None else None
    return str(session) if session else DEFAULT_SESSION


def _declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this call may be answered with a bridge-issued handle. A ``CreateTaskResult``
    exists on the 2026-07-28 wire only: a handshake-era client that names the Tasks extension
    in its ``initialize`` capabilities (the MCP Inspector's default) could not be sent one (the
    SDK refuses it as "Handler returned an invalid result"), so it is served as a plain
    ``tools/call`` that waits, with progress."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    declared = capabilities.extensions if capabilities is not None else None
    return bool(declared) and TASKS_EXTENSION in (declared or {})


def _task_request(ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
    """A ``tasks/*`` request is served to a client that declared the Tasks extension on it
    (``-32021`` otherwise, as the extension requires: a client that cannot read a task body is
    told which capability is missing), and over HTTP only when its ``Mcp-Name`` header names
    the ``taskId`` it carries when it sends one (``-32020``: the SDK checks the header for
    ``tools/call``, not for the extension's methods)."""
    if not _declares_tasks(ctx):
        raise MCPError(
            code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"tasks/* needs the {TASKS_EXTENSION} extension declared by the client",
            data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )
    headers = _headers(ctx)
    named = None if headers is None else headers.get(MCP_NAME_HEADER)
    # A header naming another task is refused; one left out is taken (fastmcp's client, among
    # others in use, does not send it yet, and the body's taskId is what is served either way).
    if named is not None and decode_header_value(named) != task_id:
        raise MCPError(
            code=mcp_types.HEADER_MISMATCH,
            message=f"{MCP_NAME_HEADER} header does not match the request's taskId",
        )


def build_server(
    calls: GatewayCalls, tokens: GatewayTokens, *, fixed_principal: str | None = None
) -> Server[Any]:
    _principal = _principal_of(tokens, fixed_principal)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=await calls.list_tools(_principal(ctx)))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
    ) -> HandlerResult:
        principal = _principal(ctx)
        arguments = dict(params.arguments or {})
        headers = _headers(ctx)
        op_id = operation_id(params.meta, headers)
        outer = outer_identity(params.meta, headers)
        call = GatewayCall(principal, _session(ctx), params.name, arguments, op_id, outer)
        if _declares_tasks(ctx):
            return await calls.call_with_task(call)
        return await calls.call_and_wait(call, client_channel(ctx, params))

    async def get_task(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        _task_request(ctx, params.task_id)
        return {
            "resultType": "complete",
            **await calls.get_task(_principal(ctx), params.task_id),
        }

    async def update_task(
        ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> HandlerResult:
        _task_request(ctx, params.task_id)
        await calls.update_task(_principal(ctx), params.task_id, params.input_responses)
        return {"resultType": "complete"}

    async def cancel_task(
        ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        _task_request(ctx, params.task_id)
        await calls.cancel_task(_principal(ctx), params.task_id)
        return {"resultType": "complete"}

    server: Server[Any] = Server("uhp-bridge-gateway", version="0.1.0", on_list_tools=list_tools)
    server.add_request_handler("tools/call", mcp_types.CallToolRequestParams, call_tool)
    server.add_request_handler(
        "logging/setLevel", mcp_types.SetLevelRequestParams, set_logging_level
    )
    server.add_request_handler("tasks/get", TaskIdParams, get_task)
    server.add_request_handler("tasks/update", UpdateTaskParams, update_task)
    server.add_request_handler("tasks/cancel", TaskIdParams, cancel_task)
    server.extensions = {TASKS_EXTENSION: {}}
    return server
