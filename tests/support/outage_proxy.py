"""An in-repo fault injector: a loopback TCP proxy in front of a real server that can play an
outage, and end it at a chosen request.

No real server produces this on cue: the race it stages is a restart that completes between two
requests of one connection attempt (the outage ends right after the request that carries a
marker, such as ``server/discover``, was dropped unanswered). Runs in the test's event loop.
"""

from __future__ import annotations

from types import TracebackType

import anyio
from anyio.abc import SocketStream, TaskGroup

from tests.support.processes import HOST

_CHUNK = 65536


class OutageProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<upstream_port>`` until :meth:`go_down`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.dropped = 0  # connections closed unanswered during the outage
        self._outage_ends_after: bytes | None = None
        self._open: set[SocketStream] = set()
        self._tg: TaskGroup | None = None

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
            self._tg_or_fail().start_soon(stream.aclose)

    async def __aenter__(self) -> OutageProxy:
        listener = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(listener.serve, self._serve)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg = self._tg_or_fail()
        tg.cancel_scope.cancel()
        await tg.__aexit__(exc_type, exc, tb)

    def _tg_or_fail(self) -> TaskGroup:
        assert self._tg is not None, "OutageProxy is not running"
        return self._tg

    async def _serve(self, client: SocketStream) -> None:
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


async def _pump(source: SocketStream, sink: SocketStream, scope: anyio.CancelScope) -> None:
    try:
        while True:
            await sink.send(await source.receive(_CHUNK))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        scope.cancel()  # one side ended: the connection is over
