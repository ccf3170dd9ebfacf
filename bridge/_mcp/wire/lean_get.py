"""A lean ``tasks/get``: the SDK's own request, sent without the SDK's per-request machinery.

Through the SDK session much of a ``tasks/get``'s client CPU goes to machinery a read does not
need (the dispatcher's pending stream and timeout clock, a writer task and queue per request,
the reply parsed twice). This module sends the *same* request, built by the SDK's own code
(stamp, id sequence, headers, span), on the connection's shared ``httpx2`` client (same auth and
:class:`~bridge._mcp.wire.transport.IsolatingTransport`), and validates the reply in one pass
into an envelope whose result is :class:`DetailedTask`. The SDK parts that are not public API
are read through :mod:`bridge._mcp.wire.sdk_compat`: without one, polls take the public
``session.send_request`` (counted in :attr:`LeanGetStats.sdk_path`).

Only 2026-07-28 sessions over Streamable HTTP take it (they carry no ``Mcp-Session-Id``, so the
request is fully known here). ``tasks/get`` has no side effects, so anything unusual (another
status or content type, a redirect, an SSE reply with more than the response, another id, a
negative ``ttlMs``) is handed to the SDK session path, which sends it again. A JSON-RPC error
raises the SDK's :class:`~mcp.MCPError`, so failures are classified as before. The details are
in docs/mcp-side.md, "The lean ``tasks/get``".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx2
import mcp_types
from httpx2 import EventSource
from mcp import MCPError
from mcp.client.session import ClientSession
from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE
from mcp.shared.dispatcher import CallOptions, coerce_request_id
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel, ValidationError

from bridge._mcp.wire import sdk_compat
from bridge._mcp.wire.shapes import PARSE_ERROR, DetailedTask, GetTaskRequest

# The headers the SDK's Streamable HTTP transport puts on every POST (``_prepare_headers``).
_TRANSPORT_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
}


@dataclass(slots=True)
class LeanGetStats:
    """How often the lean path answered, and why it handed a request to the SDK path."""

    answered: int = 0
    sse_replies: int = 0  # of those answered, how many came as an event stream
    fallbacks: Counter[str] = field(default_factory=Counter)
    # Polls sent by the public SDK path because an SDK part the lean path needs is missing
    # (bridge._mcp.wire.sdk_compat), and that part.
    sdk_path: int = 0
    sdk_path_reason: str | None = None


class _Reply(BaseModel):
    """A JSON-RPC response to ``tasks/get`` or an error, validated in one pass."""

    jsonrpc: Literal["2.0"]
    id: mcp_types.RequestId | None = None
    result: DetailedTask | None = None
    error: mcp_types.ErrorData | None = None


class _Fallback(Exception):
    """Hand this request to the SDK session path (``reason`` names why, never the task)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def lean_session(session: ClientSession) -> bool:
    """Whether this SDK session's requests are fully known without its transport: a
    2026-07-28 session (no ``Mcp-Session-Id``), negotiated by discovery."""
    return (
        session.protocol_version in MODERN_PROTOCOL_VERSIONS and session.discover_result is not None
    )


async def lean_fetch(
    session: ClientSession,
    http: httpx2.AsyncClient,
    url: httpx2.URL | str,
    request: GetTaskRequest,
    timeout_s: float,
    stats: LeanGetStats,
) -> DetailedTask:
    """Send ``request`` as the SDK session would, on ``http``; see the module docstring.

    The caller checked :func:`lean_session`.
    """
    parts = sdk_compat.lean_parts(session)
    if isinstance(parts, str):  # an SDK part is missing: the public path, counted
        sdk_compat.fell_back(sdk_compat.LEAN_GET, parts)
        stats.sdk_path += 1
        stats.sdk_path_reason = parts
        return await _public_path(session, request, timeout_s)
    if parts.closed():  # the SDK path raises its own "connection closed"
        return await _fall_back(session, request, timeout_s, stats, "session closed")
    # ClientSession.send_request, up to the dispatcher.
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    method: str = data["method"]
    opts: CallOptions = {}
    parts.stamp(data, opts)
    headers = opts.setdefault("headers", {})
    if (key := type(request).name_param) is not None and MCP_NAME_HEADER not in headers:
        headers[MCP_NAME_HEADER] = encode_header_value(data["params"][key])
    # JSONRPCDispatcher.send_raw_request: an id from the session's own sequence.
    request_id = parts.next_id()
    params = dict(data["params"])
    meta = dict(params.get("_meta") or {})
    outcome: DetailedTask | mcp_types.ErrorData | _Fallback
    with parts.otel_span(
        f"MCP send {method}",
        kind=SpanKind.CLIENT,
        attributes={"mcp.method.name": method, "jsonrpc.request.id": str(request_id)},
    ) as span:
        parts.inject_trace_context(meta)
        if meta:
            params["_meta"] = meta
        else:
            params.pop("_meta", None)
        message = mcp_types.JSONRPCRequest(
            jsonrpc="2.0", id=request_id, method=method, params=params
        )
        # StreamableHTTPTransport._handle_post_request: its headers, then the stamped ones.
        post_headers = {**_TRANSPORT_HEADERS, **headers}
        body = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
        try:
            with anyio.fail_after(timeout_s):
                outcome = await _exchange(http, url, body, post_headers, request_id, stats)
        except TimeoutError:
            raise MCPError(
                code=mcp_types.REQUEST_TIMEOUT, message=f"Request {method!r} timed out"
            ) from None
        except _Fallback as fallback:
            outcome = fallback
        if isinstance(outcome, mcp_types.ErrorData):
            code = str(outcome.code)
            span.set_attributes({"error.type": code, "rpc.response.status_code": code})
            span.set_status(StatusCode.ERROR, outcome.message)
    if isinstance(outcome, _Fallback):
        return await _fall_back(session, request, timeout_s, stats, outcome.reason)
    if isinstance(outcome, mcp_types.ErrorData):
        raise MCPError(code=outcome.code, message=outcome.message, data=outcome.data)
    stats.answered += 1
    return outcome


async def _fall_back(
    session: ClientSession,
    request: GetTaskRequest,
    timeout_s: float,
    stats: LeanGetStats,
    reason: str,
) -> DetailedTask:
    stats.fallbacks[reason] += 1
    return await _public_path(session, request, timeout_s)


async def _public_path(
    session: ClientSession, request: GetTaskRequest, timeout_s: float
) -> DetailedTask:
    reply: DetailedTask = await session.send_request(
        request, DetailedTask, request_read_timeout_seconds=timeout_s
    )
    return reply


async def _exchange(
    http: httpx2.AsyncClient,
    url: httpx2.URL | str,
    body: dict[str, Any],
    headers: dict[str, str],
    request_id: int,
    stats: LeanGetStats,
) -> DetailedTask | mcp_types.ErrorData:
    """The POST through the connection's ``httpx2`` client, and its reply."""
    post = http.build_request("POST", url, json=body, headers=headers)
    response = await http.send(post, stream=True, follow_redirects=False)
    return await _answer(response, request_id, stats)


async def _answer(
    response: httpx2.Response, request_id: int, stats: LeanGetStats
) -> DetailedTask | mcp_types.ErrorData:
    """The reply in ``response`` (closed afterwards)."""
    try:
        status = response.status_code
        content_type = response.headers.get("content-type", "").lower()
        if status == 200 and content_type.startswith("application/json"):
            return _parse(await _read(response), request_id)
        if status == 200 and content_type.startswith("text/event-stream"):
            return await _single_sse_reply(response, request_id, stats)
        if status >= 400 and content_type.startswith("application/json"):
            # A JSON-RPC error at an HTTP error status: the server's, or the isolating
            # transport's (no answer, 429/503 with Retry-After). The SDK surfaces it as is.
            error = _error_body(await _read(response))
            if error is not None:
                return error
        raise _Fallback(f"http {status} {content_type.partition(';')[0] or '-'}")
    finally:
        await response.aclose()


async def _read(response: httpx2.Response) -> bytes:
    try:
        return await response.aread()
    except httpx2.TransportError:  # the engine's read of a body that broke off
        exc: httpx2.StreamError = httpx2.StreamClosed()
    except httpx2.StreamError as broken:  # the body broke off: as the SDK reports it
        exc = broken
    raise _broke_off(exc) from None


def _broke_off(exc: httpx2.StreamError) -> MCPError:
    return MCPError(code=PARSE_ERROR, message=f"Failed to parse JSON response: {exc}")


def _parse(body: bytes | str, request_id: int) -> DetailedTask | mcp_types.ErrorData:
    """One JSON-RPC reply for ``request_id``: its result, or its error."""
    try:
        reply = _Reply.model_validate_json(body, by_name=False)
    except ValidationError:
        return _parse_as_the_sdk_does(body, request_id)
    if reply.id is None and reply.result is None and reply.error is None:
        raise _Fallback("server message instead of the reply")
    if reply.id is None or coerce_request_id(reply.id) != request_id:
        raise _Fallback("reply for another id")
    if reply.error is not None and reply.result is None:
        return reply.error
    result = reply.result
    if reply.error is not None or result is None or (result.ttl_ms or 0) < 0:
        return _parse_as_the_sdk_does(body, request_id)
    return result


def _parse_as_the_sdk_does(
    body: bytes | str, request_id: int
) -> DetailedTask | mcp_types.ErrorData:
    """The SDK's two-step parse, for replies the one-pass envelope did not take: the same
    errors for a body that is no JSON-RPC message (-32700) or a result that does not fit."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(body, by_name=False)
    except ValidationError as exc:
        error = f"Failed to parse JSON response: {exc}"
        return mcp_types.ErrorData(code=PARSE_ERROR, message=error)
    if not isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
        raise _Fallback("server message instead of the reply")
    if message.id is None or coerce_request_id(message.id) != request_id:
        raise _Fallback("reply for another id")
    if isinstance(message, mcp_types.JSONRPCError):
        return message.error
    raw = dict(message.result)
    sdk_compat.clamp_inbound_ttl(raw)
    return DetailedTask.model_validate(raw, by_name=False)


def _error_body(body: bytes) -> mcp_types.ErrorData | None:
    try:
        parsed = mcp_types.jsonrpc_message_adapter.validate_json(body, by_name=False)
    except ValidationError:
        return None
    return parsed.error if isinstance(parsed, mcp_types.JSONRPCError) else None


async def _single_sse_reply(
    response: httpx2.Response, request_id: int, stats: LeanGetStats
) -> DetailedTask | mcp_types.ErrorData:
    """The reply from an SSE stream that carries it alone (comments and empty priming events
    aside); a stream with anything else goes to the SDK path, which delivers the rest too."""
    try:
        async for event in EventSource(response, max_event_size=DEFAULT_MAX_SSE_EVENT_SIZE):
            if event.event != "message":
                raise _Fallback("sse event of another type")
            if not event.data:
                continue  # a priming event: nothing to resume, the reply follows
            reply = _parse(event.data, request_id)
            if isinstance(reply, mcp_types.ErrorData) and reply.code == PARSE_ERROR:
                raise _Fallback("sse event not a reply")  # the SDK words this one its own way
            stats.sse_replies += 1
            return reply
    except (httpx2.SSEError, httpx2.StreamError):
        raise _Fallback("sse stream failed") from None
    raise _Fallback("sse stream ended without a reply")
