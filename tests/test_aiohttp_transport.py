"""The aiohttp engine under the SDK's httpx2 client (bridge._mcp.wire.aiohttp_transport).

Against an in-repo raw-socket HTTP fake (``WireFake``), because the point is what goes over the
socket and what comes back when a server misbehaves at the byte level, which no real MCP server
does on purpose: the same request bytes as httpx2's stock transport, responses streamed as they
arrive, keep-alive, and every failure raised as the httpx2 exception the layers above classify.
The engine under real MCP servers is covered by every MCP test (it is the default engine) and by
``tests/test_mcp_lean_get.py``, which runs on both engines.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx2
import pytest
import sniffio

from bridge._mcp.wire.aiohttp_transport import AiohttpTransport
from bridge._mcp.wire.transport import SYNTHETIC_KEY, IsolatingTransport
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK_JSON = (
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
)


class WireFake:
    """A loopback HTTP/1.1 fake: records each request's bytes, answers with ``reply``."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[bytes] = []
        self.connections = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                self.requests.append(head + await reader.readexactly(length))
                await self.reply(reader, writer)
                if writer.is_closing():
                    return
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.close()


async def answer_ok(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(OK_JSON)
    await writer.drain()


def client_on(transport: httpx2.AsyncBaseTransport, read_s: float = 5.0) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=transport,
        headers={"Authorization": "Bearer wire-token"},
        timeout=httpx2.Timeout(read_s, connect=2.0),
    )


def on_aiohttp(read_s: float = 5.0) -> httpx2.AsyncClient:
    return client_on(AiohttpTransport(fallback=httpx2.AsyncHTTPTransport()), read_s)


async def exchange_all(client: httpx2.AsyncClient, url: str) -> None:
    """What the SDK's transport sends: a JSON POST, the listen GET, the session DELETE."""
    body = {"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"taskId": "t"}}
    stamped = {"Mcp-Method": "tasks/get", "accept": "application/json, text/event-stream"}
    assert (await client.post(url, json=body, headers=stamped)).json() == {"ok": True}
    assert (await client.get(url, headers={"accept": "text/event-stream"})).status_code == 200
    assert (await client.delete(url, headers={"mcp-session-id": "s-1"})).status_code == 200


async def test_both_engines_put_the_same_bytes_on_the_wire() -> None:
    fake = WireFake(answer_ok)
    async with fake.running() as url:
        async with client_on(httpx2.AsyncHTTPTransport()) as stock:
            await exchange_all(stock, url)
        async with client_on(AiohttpTransport(fallback=httpx2.AsyncHTTPTransport())) as lean:
            await exchange_all(lean, url)
    by_stock, by_aiohttp = fake.requests[:3], fake.requests[3:]
    assert len(by_aiohttp) == 3
    # Method, target, header lines in order and case, body. The one difference: aiohttp
    # always states the length of a body-less DELETE (the SDK's session end; harmless).
    assert by_aiohttp[:2] == by_stock[:2]
    assert by_aiohttp[2] == by_stock[2].replace(b"\r\n\r\n", b"\r\nContent-Length: 0\r\n\r\n")
    assert b"\r\nAuthorization: Bearer wire-token\r\n" in by_aiohttp[0]
    assert fake.connections == 2  # one kept-alive connection per client


async def test_a_streamed_body_arrives_as_it_is_sent() -> None:
    second_may_go = asyncio.Event()

    async def stream_two_events(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for event in (b"data: one\n\n", b"data: two\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await second_may_go.wait()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    fake = WireFake(stream_two_events)
    async with fake.running() as url, on_aiohttp() as client:
        async with client.stream("GET", url) as response:
            seen = []
            async for line in response.aiter_lines():
                if line:
                    seen.append(line)
                if seen == ["data: one"]:
                    second_may_go.set()  # the first event came before the second was sent
        assert seen == ["data: one", "data: two"]
        # The stream was read to its end: its connection is reused.
        assert (await client.get(url)).status_code == 200
    assert fake.connections == 1


async def test_a_body_left_unread_does_not_leave_its_connection_in_the_pool() -> None:
    async def long_body(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 10)
        await writer.drain()  # and never the rest

    fake = WireFake(long_body)
    async with fake.running() as url, on_aiohttp() as client:
        for _ in range(2):
            async with client.stream("GET", url) as response:
                assert response.status_code == 200  # closed with its body unread
    assert fake.connections == 2


async def closes_before_answering(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


async def breaks_off_the_body(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"partial":')
    await writer.drain()
    writer.close()


async def garbles_the_status_line(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 two hundred\r\n\r\n")
    await writer.drain()
    writer.close()


async def never_answers(reader: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
    await reader.read()  # until the client gives up and closes


@pytest.mark.parametrize(
    ("reply", "raised"),
    [
        (closes_before_answering, httpx2.RemoteProtocolError),
        (garbles_the_status_line, httpx2.RemoteProtocolError),
        (never_answers, httpx2.ReadTimeout),
    ],
)
async def test_a_failure_before_the_response_is_the_httpx2_exception(
    reply: Reply, raised: type[Exception]
) -> None:
    fake = WireFake(reply)
    async with fake.running() as url, on_aiohttp(0.3) as client:
        with pytest.raises(raised):
            await client.post(url, json={})


async def test_a_body_broken_off_is_a_remote_protocol_error() -> None:
    fake = WireFake(breaks_off_the_body)
    async with (
        fake.running() as url,
        on_aiohttp() as client,
        client.stream("POST", url, json={}) as response,
    ):
        assert response.status_code == 200
        with pytest.raises(httpx2.RemoteProtocolError):
            await response.aread()


async def test_nobody_listening_is_a_connect_error() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with client_on(AiohttpTransport(fallback=httpx2.AsyncHTTPTransport())) as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/mcp")


async def test_under_the_isolating_transport_a_failure_stays_that_requests_error() -> None:
    retired: list[bool] = []
    engine = AiohttpTransport(fallback=httpx2.AsyncHTTPTransport())
    transport = IsolatingTransport(engine, on_failure=lambda: retired.append(True))
    fake = WireFake(closes_before_answering)
    async with fake.running() as url, client_on(transport) as client:
        response = await client.post(url, json={})
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["data"] == {SYNTHETIC_KEY: {"error": "RemoteProtocolError"}}
    assert retired == [True]


@pytest.mark.e2e  # a server restarted
@pytest.mark.parametrize("engine", ["httpcore", "aiohttp"])
async def test_a_pooled_connection_closed_by_a_restart_is_replaced(engine: str) -> None:
    stock = httpx2.AsyncHTTPTransport()
    transport = stock if engine == "httpcore" else AiohttpTransport(fallback=stock)
    with ServerProcess("bench.fast_tasks_server") as server:
        async with httpx2.AsyncClient(transport=transport) as client:
            url = f"http://127.0.0.1:{server.port}/mcp"
            first = await client.get(url)
            server.restart()  # the same port; the pooled connection is gone with the process
            second = await client.get(url)
    assert first.status_code == second.status_code


class CountingTransport(httpx2.AsyncBaseTransport):
    """A fallback that answers every request itself and counts them (the stock transport
    would need trio installed to run where sniffio says trio)."""

    def __init__(self) -> None:
        self.requests = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        return httpx2.Response(204, request=request)


async def test_outside_asyncio_requests_go_to_the_fallback() -> None:
    fallback = CountingTransport()
    fake = WireFake(answer_ok)
    async with fake.running() as url, client_on(AiohttpTransport(fallback=fallback)) as client:
        assert (await client.get(url)).status_code == 200
        assert fallback.requests == 0  # asyncio: aiohttp took it
        token = sniffio.current_async_library_cvar.set("trio")  # as a trio caller sees it
        try:
            assert (await client.get(url)).status_code == 204
        finally:
            sniffio.current_async_library_cvar.reset(token)
        assert fallback.requests == 1


async def test_a_compressed_body_is_decoded_by_httpx2() -> None:
    """aiohttp hands the raw bytes over; the httpx2 response decodes them, as on the stock
    transport."""
    packed = gzip.compress(b'{"ok":true}')

    async def gzipped(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(packed), packed)
        )
        await writer.drain()

    fake = WireFake(gzipped)
    async with fake.running() as url, on_aiohttp() as client:
        response = await client.post(url, json={})
    assert response.json() == {"ok": True}
