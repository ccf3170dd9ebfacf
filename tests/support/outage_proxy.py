"""An in-repo fault injector: a loopback TCP proxy in front of a real server that can play an
outage, and end it at a chosen request.

No real server produces this on cue: the race it stages is a restart that completes between two
requests of one connection attempt (the outage ends right after the request that carries a
marker, such as ``server/discover``, was dropped unanswered). Runs in the test's event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

from tests.support.processes import HOST

_CHUNK = 65536


class OutageProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<upstream_port>`` until :meth:`go_down`.
    Run it with :func:`outage_proxy`."""

    def __init__(self, upstream_port: int, port: int, task_group: TaskGroup) -> None:
        self.upstream_port = upstream_port
        self.port = port
        self.dropped = 0  # connections closed unanswered during the outage
        self._outage_ends_after: bytes | None = None
        self._open: set[SocketStream] = set()
        self._tg = task_group

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/mcp"

    @property
    def down(self) -> bool:
        return self._outage_ends_after is not None

    def go_down(self, *, until_dropped: bytes) -> None:
        """Close every open connection; then close each new one unanswered, up to and including
        the first whose request carries ``until_dropped`` (the outage ends right after it)."""
        self._outage_ends_after = until_dropped
        for stream in list(self._open):
            self._tg.start_soon(stream.aclose)

    async def serve(self, client: SocketStream) -> None:
        self._open.add(client)
        try:
            first = await client.receive(_CHUNK)
            marker = self._outage_ends_after
            if marker is not None:
                self.dropped += 1
                if marker in first:
                    self._outage_ends_after = None
                return
            async with await anyio.connect_tcp(HOST, self.upstream_port) as upstream:
                self._open.add(upstream)
                await upstream.send(first)
                async with anyio.create_task_group() as relay:
                    relay.start_soon(_pump, client, upstream, relay.cancel_scope)
                    relay.start_soon(_pump, upstream, client, relay.cancel_scope)
                self._open.discard(upstream)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            self._open.discard(client)
            await client.aclose()


@asynccontextmanager
async def outage_proxy(upstream_port: int) -> AsyncIterator[OutageProxy]:
    """An :class:`OutageProxy` listening on a free loopback port while the block runs."""
    listener = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
    async with anyio.create_task_group() as tg:
        port = listener.extra(SocketAttribute.local_port)
        proxy = OutageProxy(upstream_port, port, tg)
        tg.start_soon(listener.serve, proxy.serve)
        yield proxy
        tg.cancel_scope.cancel()


async def _pump(source: SocketStream, sink: SocketStream, scope: anyio.CancelScope) -> None:
    try:
        while True:
            await sink.send(await source.receive(_CHUNK))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        scope.cancel()  # one side ended: the connection is over
