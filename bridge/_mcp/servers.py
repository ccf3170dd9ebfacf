"""MCP server identities and long-lived SDK clients, one per server (shared, reconnecting).

A fresh SDK client costs ~30 ms on these machines, so each configured server gets one
``httpx2`` client and one long-lived SDK ``Client`` that is reused by every call and poll. The
SDK ``Client`` must be entered and left in one task, so a small supervisor task owns it; when
the transport breaks, the supervisor ends and the next request reconnects.

Credentials are given by *reference*: the ledger stores ``credential_ref``; the host's resolver
turns it into a bearer token only when a connection is opened.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import anyio
import httpx2
import mcp_types
from anyio.abc import TaskGroup
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import (
    ClientSession,
    ElicitationFnT,
    IncomingMessage,
    MessageHandlerFnT,
    SamplingFnT,
)
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bridge._config import (
    CredentialResolver,
    McpServerConfig,
    no_credentials,
)
from bridge._errors import (
    ServerConnectFailed,
    ServerCredentialsRejected,
    ServerNotReachable,
    ServerTlsFailed,
    UnknownServer,
)
from bridge._mcp.wire.aiohttp_transport import AiohttpTransport
from bridge._mcp.wire.extension import TasksClientExtension
from bridge._mcp.wire.input_capabilities import NO_INPUTS, DeclaringClient, InputCapabilities
from bridge._mcp.wire.lean_get import LeanGetStats
from bridge._mcp.wire.negotiation import fail_unanswered_discovery
from bridge._mcp.wire.sdk_compat import fast_paths
from bridge._mcp.wire.shapes import TaskStatusPush
from bridge._mcp.wire.transport import CREDENTIAL_STATUSES, SYNTHETIC_KEY, IsolatingTransport

log = logging.getLogger(__name__)

# Resolves a server's ``credential_ref`` to its bearer token (None: no token) when a client
# connects; the token is never stored in the ledger.
# The input kinds (elicitation modes, sampling) declared to a server, by server name.
DeclaredInputs = Callable[[str], InputCapabilities]


@dataclass(slots=True)
class ServerInfo:
    name: str | None = None
    version: str | None = None
    protocol_version: str | None = None
    capabilities: mcp_types.ServerCapabilities | None = None


@dataclass(frozen=True, slots=True)
class PushHooks:
    """Where a connection hands what a listen stream delivers (see :mod:`bridge._mcp.polling.push`),
    each called with the server's name: pushed task states, and other server messages (the
    listen acknowledgement is one)."""

    on_task_status: Callable[[str, TaskStatusPush], Awaitable[None]]
    on_message: Callable[[str, IncomingMessage], Awaitable[None]]


class ServerRequests(Protocol):
    """Answers a server's own requests for input (elicitation, sampling) on one connection,
    told the server's endpoint (see :mod:`bridge._mcp.inputs.legacy_held_result`)."""

    def callbacks(self, endpoint: str) -> tuple[ElicitationFnT, SamplingFnT]: ...


class _ConnectionClient(DeclaringClient):
    """The SDK client of one connection: it declares the bridge's input kinds, and a
    discovery that got no answer fails the connect (see :mod:`bridge._mcp.wire.negotiation`)."""

    def session_built(self, session: ClientSession) -> None:
        super().session_built(session)
        fail_unanswered_discovery(session)


@dataclass(slots=True)
class _Live:
    client: Client
    stop: anyio.Event = field(default_factory=anyio.Event)


class ServerConnection:
    """A reconnecting SDK client for one server (tasks declared, or not)."""

    def __init__(
        self,
        config: McpServerConfig,
        *,
        declare_tasks: bool,
        http_client: httpx2.AsyncClient | None,
        task_group: TaskGroup,
        declared_inputs: InputCapabilities = NO_INPUTS,
        push: PushHooks | None = None,
        server_requests: ServerRequests | None = None,
    ) -> None:
        self.config = config
        self._server_requests = server_requests
        self.declare_tasks = declare_tasks
        self.declared_inputs = declared_inputs
        self._push = push
        self._http = http_client
        self._tg = task_group
        self._live: _Live | None = None
        self._lock = anyio.Lock()
        self._connecting: anyio.CancelScope | None = None
        self.info = ServerInfo()
        self._annotations: dict[str, mcp_types.ToolAnnotations | None] | None = None
        self.lean_get_stats = LeanGetStats()
        # The endpoint parsed once (httpx2 parses a str URL on every request it builds).
        self.parsed_url = httpx2.URL(config.url) if config.url is not None else None

    @property
    def http_client(self) -> httpx2.AsyncClient | None:
        """The shared HTTP client the SDK transport of this connection sends on (None: stdio)."""
        return self._http

    async def session(self) -> ClientSession:
        """A connected session, reconnecting if the previous transport broke."""
        live = self._live
        if live is not None:
            return live.client.session
        async with self._lock:
            if self._live is None:
                await self._connect()
            assert self._live is not None
            return self._live.client.session

    async def _connect(self) -> None:
        ready = anyio.Event()
        failure: list[BaseException] = []
        # A connect can hang (a handshake whose reply never comes): once given up on, or on
        # close, it is cancelled, so no supervisor outlives it and holds the task group open.
        attempt = self._connecting = anyio.CancelScope()

        async def supervise() -> None:
            live: _Live | None = None
            with attempt:
                try:
                    async with self._new_client() as client:
                        live = _Live(client)
                        self._live = live
                        self._remember_info(client)
                        ready.set()
                        await live.stop.wait()
                except Exception as exc:  # transport gone: the next request reconnects
                    failure.append(exc)
                    log.debug("connection to %s ended: %r", self.config.name, exc)
                finally:
                    if self._live is live:
                        self._live = None
                    ready.set()

        self._tg.start_soon(supervise)
        with anyio.move_on_after(self.config.connect_timeout_s) as scope:
            await ready.wait()
        self._connecting = None
        if self._live is None:
            attempt.cancel()
            if scope.cancelled_caught:
                raise ServerNotReachable(self.config.name, "connect timeout")
            sent = self._http is not None and "authorization" in self._http.headers
            raise connect_error(self.config.name, failure, sent_credentials=sent)

    def _new_client(self) -> _ConnectionClient:
        name, push = self.config.name, self._push
        extensions = []
        if self.declare_tasks:
            sink = None if push is None else partial(push.on_task_status, name)
            extensions.append(TasksClientExtension(on_task_status=sink))
        handler = None if push is None else _message_handler(push, name)
        if self.config.url is not None:
            transport: Any = streamable_http_client(self.config.url, http_client=self._http)
        else:
            transport = StdioServerParameters(
                command=self.config.command or "",
                args=list(self.config.args),
                env=dict(self.config.env) if self.config.env is not None else None,
            )
        elicit = sample = None
        if self._server_requests is not None:
            elicit, sample = self._server_requests.callbacks(self.config.endpoint)
        client = _ConnectionClient(
            transport,
            extensions=extensions,
            cache=None,
            message_handler=handler,
            elicitation_callback=elicit,
            sampling_callback=sample,
        )
        client.declared = self.declared_inputs
        return client

    def _remember_info(self, client: Client) -> None:
        info = client.server_info
        before, now = self.info.protocol_version, client.protocol_version
        if before in MODERN_PROTOCOL_VERSIONS and now not in MODERN_PROTOCOL_VERSIONS:
            # The server itself answered discovery as a handshake-era server (an outage
            # cannot choose this: bridge._mcp.wire.negotiation): its 2026-07-28 handles will be
            # refused until it speaks that version again.
            log.warning("server %s now negotiates %s (was %s)", self.config.name, now, before)
        self.info = ServerInfo(
            name=info.name if info is not None else self.info.name,
            version=info.version if info is not None else self.info.version,
            protocol_version=client.protocol_version,
            capabilities=client.server_capabilities,
        )

    def reset(self) -> None:
        """Drop the current transport now; the next use reconnects."""
        live, self._live = self._live, None
        if live is not None:
            live.stop.set()

    def retire(self) -> None:
        """After a transport failure: new requests get a new client (the session may be gone
        with the server), while requests already in flight on the old one may still finish
        (their answers are not thrown away); the old client stops after a request timeout."""
        live, self._live = self._live, None
        if live is not None:
            self._tg.start_soon(self._stop_after_timeout, live)

    async def _stop_after_timeout(self, live: _Live) -> None:
        with anyio.move_on_after(self.config.request_timeout_s):
            await live.stop.wait()
        live.stop.set()

    async def list_tools(self) -> list[mcp_types.Tool]:
        """Every tool the server lists (``tools/list``, all pages), over this connection."""
        session = await self.session()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            listing = await session.list_tools(params=params)
            tools.extend(listing.tools)
            cursor = listing.next_cursor
            if not cursor:
                return tools

    async def tool_annotations(self, tool: str) -> mcp_types.ToolAnnotations | None:
        """The tool's annotations from ``tools/list`` (fetched once per connection set-up)."""
        if self._annotations is None:
            self._annotations = {item.name: item.annotations for item in await self.list_tools()}
        return self._annotations.get(tool)

    async def close(self) -> None:
        connecting = self._connecting
        if connecting is not None:
            connecting.cancel()
        self.reset()


def _message_handler(push: PushHooks, server: str) -> MessageHandlerFnT:
    async def handle(message: IncomingMessage) -> None:
        await push.on_message(server, message)

    return handle


def connect_error(
    server: str, failure: list[BaseException], *, sent_credentials: bool
) -> ServerConnectFailed:
    """The typed error for a connect that failed with ``failure``: HTTP 401/403 ->
    :class:`~bridge.errors.ServerCredentialsRejected`; TLS ->
    :class:`~bridge.errors.ServerTlsFailed`; no answer (DNS, refused, closed) ->
    :class:`~bridge.errors.ServerNotReachable` (what :mod:`bridge._mcp.wire.transport` put in
    the error's data says which); anything else the base class, with its detail."""
    if not failure:
        return ServerNotReachable(server, "connection closed")
    exc = failure[0]
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    answer: BaseException | None = exc  # an MCPError the transport made, maybe wrapped
    while answer is not None and not isinstance(answer, MCPError):
        answer = answer.__cause__  # DiscoveryUnanswered (bridge._mcp.wire.negotiation) chains it
    data = answer.data if isinstance(answer, MCPError) else None
    made = data.get(SYNTHETIC_KEY) if isinstance(data, dict) else None
    if isinstance(made, dict):
        status = made.get("httpStatus")
        if status in CREDENTIAL_STATUSES:
            return ServerCredentialsRejected(server, status, sent_credentials=sent_credentials)
        cause, error = made.get("cause"), made.get("error", "transport failure")
        if cause == "tls":
            return ServerTlsFailed(server, f"{error} during the TLS handshake")
        if status is None:
            return ServerNotReachable(server, f"{error}" + (f" ({cause})" if cause else ""))
    if isinstance(exc, OSError):  # a stdio command that cannot be started
        return ServerNotReachable(server, f"{type(exc).__name__}: {exc}")
    return ServerConnectFailed(server, f"{type(exc).__name__}: {exc}")


class ServerPool:
    """The configured servers and their shared connections, looked up by name or endpoint."""

    def __init__(
        self,
        servers: list[McpServerConfig],
        task_group: TaskGroup,
        credentials: CredentialResolver = no_credentials,
        declared_inputs: DeclaredInputs = lambda _name: NO_INPUTS,
    ) -> None:
        # The SDK's private parts checked at start-up: a missing one is logged now, not at the
        # first poll (bridge._mcp.wire.sdk_compat).
        fast_paths()
        self._configs = {s.name: s for s in servers if s.enabled}
        self._declared_inputs = declared_inputs
        self._by_endpoint = {s.endpoint: s for s in self._configs.values()}
        self._tg = task_group
        self._credentials = credentials
        self._http: dict[str, httpx2.AsyncClient] = {}
        self._connections: dict[tuple[str, bool], ServerConnection] = {}
        # Set before the first connection is made when pushed task states are wanted.
        self.push_hooks: PushHooks | None = None
        # Set before the first connection: who answers the servers' own input requests.
        self.server_requests: ServerRequests | None = None

    def config(self, name: str) -> McpServerConfig:
        try:
            return self._configs[name]
        except KeyError:
            raise UnknownServer(f"no enabled MCP server named {name!r}") from None

    def config_for_endpoint(self, endpoint: str) -> McpServerConfig | None:
        return self._by_endpoint.get(endpoint)

    def connection(self, name: str, *, declare_tasks: bool = True) -> ServerConnection:
        config = self.config(name)
        key = (name, declare_tasks)
        found = self._connections.get(key)
        if found is None:
            found = ServerConnection(
                config,
                declare_tasks=declare_tasks,
                http_client=self._http_client(config),
                task_group=self._tg,
                declared_inputs=self._declared_inputs(name),
                push=self.push_hooks if declare_tasks and config.push_updates else None,
                server_requests=self.server_requests,
            )
            self._connections[key] = found
        return found

    def _http_client(self, config: McpServerConfig) -> httpx2.AsyncClient | None:
        if config.url is None:
            return None
        client = self._http.get(config.name)
        if client is None:
            headers = dict(config.headers or {})
            if config.credential_ref is not None:
                token = self._credentials(config.credential_ref)
                if token:
                    headers["Authorization"] = f"Bearer {token}"
            # The logical per-request deadline is the SDK's (-32001); the socket read timeout
            # only has to outlast it.
            timeout = httpx2.Timeout(
                config.request_timeout_s * 2 + 5, connect=config.connect_timeout_s
            )
            # One request's transport failure stays that request's (see bridge._mcp.wire.transport).
            stock = httpx2.AsyncHTTPTransport()
            aiohttp = AiohttpTransport(fallback=stock) if config.http_engine == "aiohttp" else None
            transport = IsolatingTransport(
                aiohttp or stock, on_failure=lambda: self._retire(config.name)
            )
            client = httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport)
            self._http[config.name] = client
        return client

    def _retire(self, name: str) -> None:
        for (server, _declared), connection in self._connections.items():
            if server == name:
                connection.retire()

    async def aclose(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        for client in self._http.values():
            await client.aclose()
