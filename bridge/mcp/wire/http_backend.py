"""A cheaper liveness probe for pooled HTTP connections (the bridge's own transport).

Before each request, and again when a response is closed, ``httpcore2``'s connection pool asks
every idle connection whether the server closed it (``get_extra_info("is_readable")``). Over
``anyio`` each answer builds the stream's whole attribute table, a ``getpeername`` system call
included, only to fetch the raw socket: with 16 pooled connections that was ~10 % of a poll's
client CPU. This backend keeps the ``anyio`` one for all I/O and answers the probe from the raw
socket it looked up once, with the same ``poll(2)`` check ``httpcore2`` makes.
"""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2


def _readable(sock: socket.socket | None) -> bool:
    """Whether a read would not block (data, or the server's close): the pool's "expired"."""
    if sock is None or sock.fileno() < 0:
        return True  # no socket any more: as good as closed
    probe = select.poll()
    probe.register(sock, select.POLLIN)
    return bool(probe.poll(0))


class _ProbedStream(httpcore2.AsyncNetworkStream):
    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _ProbedStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _readable(self._socket)
        if info == "socket":
            return self._socket
        return self._inner.get_extra_info(info)


class ProbingBackend(httpcore2.AsyncNetworkBackend):
    """``httpcore2``'s ``anyio`` backend, with :class:`_ProbedStream` connections."""

    def __init__(self) -> None:
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        inner = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _ProbedStream(inner)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        return _ProbedStream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def probing_transport() -> httpx2.AsyncHTTPTransport:
    """``httpx2``'s default transport, its pool on :class:`ProbingBackend` where the platform
    has ``poll(2)`` (elsewhere, as it comes)."""
    transport = httpx2.AsyncHTTPTransport()
    pool = getattr(transport, "_pool", None)  # httpx2 builds the pool without a backend option
    if hasattr(select, "poll") and isinstance(pool, httpcore2.AsyncConnectionPool):
        pool._network_backend = ProbingBackend()
    return transport
