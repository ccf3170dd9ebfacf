"""An ``httpx2`` transport that does its HTTP/1.1 on ``aiohttp`` (C parser, asyncio protocol).

The stock ``httpx2`` transport's pure-Python pool and parser cost most of a small ``tasks/get``'s
client CPU. This one keeps the ``httpx2`` client and everything above it (the SDK's transport,
auth, headers, timeouts, :class:`~bridge._mcp.wire.transport.IsolatingTransport`) and replaces
only the pool and the wire: the request goes out exactly as ``httpx2`` built it, the response
comes back as an ``httpx2.Response`` with a streamed body, ``aiohttp``'s failures are raised as
the ``httpx2`` exceptions the layers above classify, and ``connect``/``read`` timeouts map to
``aiohttp``'s (no total). See docs/mcp-side.md, "The HTTP engine".

It runs only on asyncio (``aiohttp`` has no trio support): under another event loop, requests
go to the ``fallback`` transport. One ``aiohttp`` session per event loop, made on first use.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import sniffio

# aiohttp adds these when a request lacks them; httpx2 already sent what it wanted.
_SKIP_AUTO = frozenset({"Accept", "Accept-Encoding", "User-Agent", "Content-Type"})


def _header_lines(request: httpx2.Request) -> list[tuple[str, str]]:
    """The request's header lines as httpx2 holds them: order and case kept."""
    return [(key.decode("latin-1"), val.decode("latin-1")) for key, val in request.headers.raw]


def available() -> bool:
    """Whether requests can run on aiohttp here: the running loop is asyncio's."""
    try:
        return sniffio.current_async_library() == "asyncio"
    except sniffio.AsyncLibraryNotFoundError:
        return False


class _Body(httpx2.AsyncByteStream):
    """The response body as aiohttp reads it, failures as httpx2's."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except Exception as exc:
            raise as_httpx2_error(exc, reading=True) from exc

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # the connection goes back to the pool
        else:
            self._response.close()  # unread body: the connection cannot be reused


def as_httpx2_error(exc: BaseException, *, reading: bool) -> BaseException:
    """aiohttp's (and asyncio's) failure as the httpx2 exception the layers above expect."""
    message = type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx2.ConnectTimeout(message)
    if isinstance(exc, aiohttp.ServerTimeoutError | asyncio.TimeoutError):
        return httpx2.ReadTimeout(message)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(message)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx2.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientResponseError):  # a malformed status line or headers
        return httpx2.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientOSError | OSError | aiohttp.ClientError):
        return httpx2.ReadError(message) if reading else httpx2.WriteError(message)
    return exc


def as_httpx2(
    response: aiohttp.ClientResponse, request: httpx2.Request | None = None
) -> httpx2.Response:
    """The ``aiohttp`` response as ``httpx2``'s: raw header lines, the body streamed."""
    return httpx2.Response(
        response.status,
        headers=response.raw_headers,
        stream=_Body(response),
        request=request,
        extensions={
            "http_version": b"HTTP/1.1",
            "reason_phrase": (response.reason or "").encode("latin-1"),
        },
    )


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """See the module docstring. ``limit``: connections per host (``aiohttp``'s default 100
    in total is lifted: the callers above bound their own concurrency)."""

    def __init__(
        self,
        fallback: httpx2.AsyncBaseTransport,
        *,
        limit_per_host: int = 100,
        keepalive_s: float = 5.0,
    ) -> None:
        self._fallback = fallback
        self._limit_per_host = limit_per_host
        self._keepalive_s = keepalive_s
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._tls_context: ssl.SSLContext | None = None

    def _tls(self) -> ssl.SSLContext:
        if self._tls_context is None:
            self._tls_context = httpx2.create_ssl_context()
        return self._tls_context

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            for other in [lp for lp in self._sessions if lp.is_closed()]:
                del self._sessions[other]  # a finished loop's session is gone with it
            connector = aiohttp.TCPConnector(
                limit=0,
                limit_per_host=self._limit_per_host,
                keepalive_timeout=self._keepalive_s,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),  # httpx2 keeps the cookies
                auto_decompress=False,  # httpx2 decodes
                skip_auto_headers=_SKIP_AUTO,
                timeout=aiohttp.ClientTimeout(total=None),
            )
            self._sessions[loop] = session
        return session

    async def open(
        self,
        method: str,
        url: str,
        header_lines: list[tuple[str, str]],
        body: bytes | None,
        timeouts: dict[str, Any],
    ) -> aiohttp.ClientResponse:
        """Send one request as given (no header added) and return the response with its body
        unread; ``aiohttp``'s failures raised as ``httpx2``'s. Asyncio only (:func:`available`).
        """
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeouts.get("connect"), sock_read=timeouts.get("read")
        )
        # https only: httpx2's trust store (certifi), made on first use (tens of ms).
        tls = self._tls() if url.startswith("https:") else True
        try:
            return await self._session().request(
                method,
                url,
                headers=header_lines,
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
                ssl=tls,
            )
        except Exception as exc:
            raise as_httpx2_error(exc, reading=False) from exc

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if not available():
            return await self._fallback.handle_async_request(request)
        response = await self.open(
            request.method,
            str(request.url),
            _header_lines(request),
            await request.aread(),
            request.extensions.get("timeout", {}),
        )
        return as_httpx2(response, request)

    async def aclose(self) -> None:
        sessions, self._sessions = self._sessions, {}
        loop = asyncio.get_running_loop() if available() else None
        for owner, session in sessions.items():
            if owner is loop:
                await session.close()
        await self._fallback.aclose()
