"""The bridge's pooled-connection probe (bridge.mcp.wire.http_backend): a closed connection is seen
as expired, an open idle one is not, and a pool on it survives a server restart."""

from __future__ import annotations

import socket

import httpcore2
import httpx2
import pytest

from bridge.mcp.wire.http_backend import ProbingBackend, _ProbedStream, probing_transport
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio


class _SocketStream(httpcore2.AsyncNetworkStream):
    """The part of a network stream the probe reads: its raw socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, info: str) -> object:
        return self.sock if info == "socket" else None


def test_the_probe_reads_the_raw_socket() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        probed = _ProbedStream(_SocketStream(ours))
        assert probed.get_extra_info("socket") is ours
        assert probed.get_extra_info("is_readable") is False  # idle and open
        theirs.close()
        assert probed.get_extra_info("is_readable") is True  # the peer closed it
    assert probed.get_extra_info("is_readable") is True  # no socket any more


def test_the_default_transport_gets_the_probing_backend() -> None:
    pool = probing_transport()._pool  # type: ignore[attr-defined]
    assert isinstance(pool, httpcore2.AsyncConnectionPool)
    assert isinstance(pool._network_backend, ProbingBackend)


@pytest.mark.e2e  # a server restarted
async def test_a_pooled_connection_closed_by_a_restart_is_replaced() -> None:
    with ServerProcess("bench.fast_tasks_server") as server:
        async with httpx2.AsyncClient(transport=probing_transport()) as client:
            url = f"http://127.0.0.1:{server.port}/mcp"
            first = await client.get(url)
            server.restart()  # the same port; the pooled connection is gone with the process
            second = await client.get(url)
    assert first.status_code == second.status_code
