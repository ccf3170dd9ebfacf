"""The lean ``tasks/get`` (bridge._mcp.wire.lean_get) against the SDK session path, on real servers:
the same bytes and headers on the wire, the same replies and the same failures, and the SDK
path whenever anything is unusual or the lean path is switched off."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
import httpx
import pytest
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED

from bridge._config import McpServerConfig
from bridge._ledger.reads.views import TaskView
from bridge._ledger.store import Ledger
from bridge._mcp.failures import FailureKind, classify
from bridge._mcp.servers import ServerConnection, ServerPool
from bridge._mcp.task_requests import fetch_task
from bridge._mcp.wire.aiohttp_transport import as_httpx2
from bridge._mcp.wire.lean_get import _read
from bridge._mcp.wire.shapes import (
    INVALID_PARAMS,
    PARSE_ERROR,
    DetailedTask,
    GetTaskRequest,
    TaskIdParams,
)
from bridge._mcp.wire.transport import SYNTHETIC_KEY
from tests.support.builders import new_run, new_task
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
TOKEN = "lean-get-token-3f9a"
RECORDER = "tests.servers.recording_tasks_server"
TASK_ID = "bench-250-7"  # the recording server answers any bench-<interval>-<n> id


@pytest.fixture(scope="module")
def recorder() -> Iterator[ServerProcess]:
    with ServerProcess(RECORDER) as server:
        yield server


@asynccontextmanager
async def connected(url: str, **options: Any) -> AsyncIterator[ServerConnection]:
    config = McpServerConfig(name="rec", url=url, credential_ref="rec-token", **options)
    async with anyio.create_task_group() as group:
        pool = ServerPool([config], group, credentials={"rec-token": TOKEN}.get)
        try:
            connection = pool.connection("rec")
            await connection.session()
            yield connection
        finally:
            await pool.aclose()
            group.cancel_scope.cancel()


def handle(sqlite_ledger: Ledger, url: str, task_id: str = TASK_ID) -> TaskView:
    tenant = sqlite_ledger.for_principal("acme")
    run = new_run(tenant)
    return new_task(tenant, run.ref, task_id=task_id, server_endpoint=url, server_name="rec")


async def recorded_gets(server: ServerProcess) -> list[tuple[list[list[str]], bytes]]:
    async with httpx.AsyncClient() as client:
        records = (await client.get(f"http://127.0.0.1:{server.port}/recorded")).json()
    posts = [(r["headers"], base64.b64decode(r["body"])) for r in records]
    return [(headers, body) for headers, body in posts if b'"method":"tasks/get"' in body]


TRACEPARENT = re.compile(rb'"traceparent":"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}"')


def without_trace_ids(body: bytes) -> bytes:
    """The body with its W3C ``traceparent`` (present once a tracer provider is set: each
    request is its own span) replaced by a placeholder; everything else stays byte for byte."""
    return TRACEPARENT.sub(b'"traceparent":"<trace>"', body)


def same_reply(a: DetailedTask, b: DetailedTask) -> bool:
    """Equal but for the server's clock (it stamps every reply with the current time)."""
    clock = {"created_at", "last_updated_at"}
    return a.model_dump(exclude=clock) == b.model_dump(exclude=clock)


async def sdk_get(connection: ServerConnection, task_id: str = TASK_ID) -> DetailedTask:
    session = await connection.session()
    request = GetTaskRequest(params=TaskIdParams(task_id=task_id))
    reply: DetailedTask = await session.send_request(request, DetailedTask)
    return reply


@pytest.mark.parametrize("engine", ["aiohttp", "httpcore"])
async def test_the_lean_request_is_the_sdk_request_byte_for_byte(
    recorder: ServerProcess, sqlite_ledger: Ledger, engine: str
) -> None:
    task = handle(sqlite_ledger, recorder.url)
    async with connected(recorder.url, http_engine=engine) as connection:
        by_sdk = await sdk_get(connection)
        # The next id again, so the two requests can be compared whole (ids never repeat
        # otherwise: the lean path takes its ids from the session's own sequence).
        session = await connection.session()
        session._dispatcher._next_id -= 1  # type: ignore[attr-defined]
        by_lean = await fetch_task(connection, task)
        assert connection.lean_get_stats.answered == 1
        assert not connection.lean_get_stats.fallbacks
        # And the sequence goes on: the SDK's next request takes the next id.
        await sdk_get(connection)
    assert same_reply(by_lean, by_sdk) and by_lean.task_id == TASK_ID
    (sdk_headers, sdk_body), (lean_headers, lean_body), (_, next_body) = (
        await recorded_gets(recorder)
    )[-3:]
    assert without_trace_ids(lean_body) == without_trace_ids(sdk_body)
    assert lean_headers == sdk_headers  # the same lines, in the same order
    names = {name for name, _ in lean_headers}
    assert {"mcp-method", "mcp-name", "mcp-protocol-version", "authorization"} <= names
    assert ["authorization", f"Bearer {TOKEN}"] in lean_headers
    assert json.loads(next_body)["id"] == json.loads(sdk_body)["id"] + 1


async def test_switched_off_every_poll_takes_the_sdk_path(
    recorder: ServerProcess, sqlite_ledger: Ledger
) -> None:
    task = handle(sqlite_ledger, recorder.url)
    async with connected(recorder.url, lean_task_get=False) as connection:
        reply = await fetch_task(connection, task)
        assert connection.lean_get_stats.answered == 0
        assert not connection.lean_get_stats.fallbacks
    assert reply.task_id == TASK_ID and reply.status == "working"


async def test_an_sse_reply_with_the_response_alone_is_read_by_the_lean_path(
    sqlite_ledger: Ledger,
) -> None:
    with ServerProcess(RECORDER, args=["--sse"]) as server:
        task = handle(sqlite_ledger, server.url)
        async with connected(server.url) as connection:
            by_sdk = await sdk_get(connection)
            by_lean = await fetch_task(connection, task)
            stats = connection.lean_get_stats
            assert stats.answered == stats.sse_replies == 1
            assert not stats.fallbacks
    assert same_reply(by_lean, by_sdk)


async def test_an_sse_reply_carrying_more_than_the_response_goes_to_the_sdk_path(
    sqlite_ledger: Ledger,
) -> None:
    with ServerProcess(RECORDER, args=["--notify-on-get"]) as server:
        task = handle(sqlite_ledger, server.url)
        async with connected(server.url) as connection:
            reply = await fetch_task(connection, task)
            stats = connection.lean_get_stats
            assert stats.answered == 0
            assert stats.fallbacks == {"server message instead of the reply": 1}
        gets = await recorded_gets(server)
    assert reply.task_id == TASK_ID and reply.status == "working"
    assert len(gets) == 2  # the lean request, then the SDK's (which saw the notification too)


async def test_a_404_goes_to_the_sdk_path_which_is_answered(sqlite_ledger: Ledger) -> None:
    with ServerProcess(RECORDER, args=["--fail-gets", "1:404"]) as server:
        task = handle(sqlite_ledger, server.url)
        async with connected(server.url) as connection:
            reply = await fetch_task(connection, task)
            assert connection.lean_get_stats.fallbacks == {"http 404 text/plain": 1}
    assert reply.task_id == TASK_ID and reply.status == "working"


@pytest.mark.parametrize("status", [429, 502, 504])
@pytest.mark.parametrize("engine", ["aiohttp", "httpcore"])
async def test_a_429_or_a_gateway_error_is_the_isolating_transports_error_and_no_second_request(
    sqlite_ledger: Ledger, engine: str, status: int
) -> None:
    """A 429 is an answer to back off, and a bare 502/504 a gateway that reached no server:
    neither is something to send again nor the server's JSON-RPC answer. On either engine each
    is the isolating transport's own error."""
    with ServerProcess(RECORDER, args=["--fail-gets", f"1:{status}"]) as server:
        task = handle(sqlite_ledger, server.url)
        async with connected(server.url, http_engine=engine) as connection:
            with pytest.raises(MCPError) as raised:
                await fetch_task(connection, task)
            stats = connection.lean_get_stats
            assert not stats.fallbacks  # the SDK path did not send it again
    assert raised.value.error.code == CONNECTION_CLOSED
    assert raised.value.error.data == {SYNTHETIC_KEY: {"httpStatus": status, "retryAfterMs": None}}


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "sdk"])
async def test_unknown_task_is_the_same_json_rpc_error_on_both_paths(
    tasks_server: ServerProcess, sqlite_ledger: Ledger, lean: bool
) -> None:
    task = handle(sqlite_ledger, tasks_server.url, task_id="no-such-task")
    async with connected(tasks_server.url, lean_task_get=lean) as connection:
        with pytest.raises(MCPError) as caught:
            await fetch_task(connection, task)
        assert connection.lean_get_stats.answered == 0
        assert not connection.lean_get_stats.fallbacks  # an error reply is an answer
    failure = classify(caught.value)
    assert failure is not None
    assert failure.kind is FailureKind.RPC_ERROR and failure.code == INVALID_PARAMS


@pytest.mark.e2e  # a server SIGKILLed
@pytest.mark.parametrize("lean", [True, False], ids=["lean", "sdk"])
async def test_a_killed_server_is_no_answer_on_both_paths(
    sqlite_ledger: Ledger, lean: bool
) -> None:
    with ServerProcess(RECORDER) as server:
        task = handle(sqlite_ledger, server.url)
        async with connected(server.url, lean_task_get=lean) as connection:
            await fetch_task(connection, task)
            server.kill()
            with pytest.raises(MCPError) as caught:
                await fetch_task(connection, task)
            assert not connection.lean_get_stats.fallbacks
    failure = classify(caught.value)
    assert failure is not None
    assert failure.kind is FailureKind.NO_ANSWER and failure.code == -32000


async def test_the_lean_request_carries_the_sdk_span_and_trace_context(
    recorder: ServerProcess, sqlite_ledger: Ledger, span_exporter: Any
) -> None:
    task = handle(sqlite_ledger, recorder.url)
    span_exporter.clear()
    async with connected(recorder.url) as connection:
        await sdk_get(connection)
        await fetch_task(connection, task)
        assert connection.lean_get_stats.answered == 1
    sends = [s for s in span_exporter.get_finished_spans() if s.name.startswith("MCP send")]
    sdk_span, lean_span = sends[-2:]
    assert lean_span.name == sdk_span.name == "MCP send tasks/get"
    assert lean_span.kind == sdk_span.kind
    assert set(lean_span.attributes or {}) == set(sdk_span.attributes or {})
    assert TASK_ID not in json.dumps({k: str(v) for k, v in (lean_span.attributes or {}).items()})
    (_, sdk_body), (_, lean_body) = (await recorded_gets(recorder))[-2:]
    sdk_meta, lean_meta = (json.loads(b)["params"]["_meta"] for b in (sdk_body, lean_body))
    trace_id = f"{lean_span.context.trace_id:032x}"
    assert lean_meta["traceparent"].split("-")[1] == trace_id
    assert lean_meta["traceparent"].split("-")[2] == f"{lean_span.context.span_id:016x}"
    assert set(lean_meta) == set(sdk_meta)


# A small in-repo fake for wire behaviour no real server produces on purpose: a reply whose
# body breaks off (fewer bytes than its Content-Length, then the connection closes).
_BROKEN_REPLY = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n"
    b'{"jsonrpc":"2.0","id":1,"result":{"taskId"'
)


@asynccontextmanager
async def body_breaking_server() -> AsyncIterator[str]:
    """A loopback server answering every request with :data:`_BROKEN_REPLY`; its URL."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(_BROKEN_REPLY)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.close()


async def test_a_reply_body_that_breaks_off_is_the_sdks_parse_error() -> None:
    """A reply body read through ``httpx2``'s stream (``_read``) that breaks off is the parse
    error the SDK reports for it."""
    async with body_breaking_server() as url, aiohttp.ClientSession(auto_decompress=False) as http:
        reply = await http.post(url, data=b"{}")
        with anyio.fail_after(10), pytest.raises(MCPError) as raised:
            await _read(as_httpx2(reply))
    assert raised.value.error.code == PARSE_ERROR
    assert raised.value.error.message.startswith("Failed to parse JSON response")
