"""The one place the bridge touches private parts of the ``mcp`` SDK, checked before use.

The lean ``tasks/get`` (:mod:`bridge._mcp.wire.lean_get`), the unchecked 2025-11-25
task-augmented ``tools/call`` (:mod:`bridge._mcp.legacy_shapes`) and the hooks on each new SDK
session need SDK internals the SDK does not promise to keep. A release that renamed one must not
turn every poll into an ``AttributeError`` retried for ever, so each part is read here only and
checked for its shape before use (module and class parts once per process, when
:class:`~bridge._mcp.servers.ServerPool` asks :func:`fast_paths`; instance parts once per
session). A missing part turns its fast path off: the public SDK path is taken, one warning per
process names the part, and each such request is counted in :data:`FALLBACKS` (the reason in
:attr:`FallbackStats.reasons`). The parts are listed in docs/mcp-side.md, "The lean ``tasks/get``".
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Final
from weakref import WeakKeyDictionary

from mcp import Client
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import ClientCapabilities
from opentelemetry.trace import Span

log = logging.getLogger(__name__)

# The fast paths, by name (the keys of FallbackStats.reasons).
LEAN_GET: Final = "lean_get"
UNCHECKED_SEND: Final = "unchecked_send"
SESSION_HOOK: Final = "session_hook"
CAPABILITY_HOOK: Final = "capability_hook"

_SESSION_MODULE = "mcp.client.session"
_OTEL_MODULE = "mcp.shared._otel"

Stamp = Callable[[dict[str, Any], CallOptions], None]
OtelSpan = Callable[..., AbstractContextManager[Span]]


@dataclass(frozen=True, slots=True)
class FastPaths:
    """Which fast paths this process's SDK allows (module and class parts; a session may still
    lack an instance part), and for each one that is off the missing part."""

    lean_get: bool
    unchecked_send: bool
    session_hook: bool
    capability_hook: bool
    missing: tuple[tuple[str, str], ...] = ()  # (fast path, missing part)

    def reason(self, path: str) -> str | None:
        return next((part for name, part in self.missing if name == path), None)


@dataclass(slots=True)
class FallbackStats:
    """Process-wide: requests (or sessions, for the hooks) that took the public SDK path
    because a fast path's private part was missing, and the part last found missing."""

    lean_get: int = 0
    unchecked_send: int = 0
    session_hook: int = 0
    capability_hook: int = 0
    reasons: dict[str, str] = field(default_factory=dict)

    def total(self) -> int:
        return self.lean_get + self.unchecked_send + self.session_hook + self.capability_hook


FALLBACKS = FallbackStats()


@dataclass(frozen=True, slots=True)
class _Process:
    paths: FastPaths
    clamp_ttl: Callable[[dict[str, Any]], None] | None
    otel_span: OtelSpan | None
    inject_trace_context: Callable[[dict[str, Any]], None] | None


_process: _Process | None = None
_warned: set[str] = set()
# Per session, its verdict for each path: the missing part, or "" (all there). Only the verdict
# is kept (weakly): the parts themselves reference the session, and its stamp changes when it
# adopts a new negotiation, so they are read afresh on each use.
_OK: Final = ""
_lean: WeakKeyDictionary[ClientSession, str] = WeakKeyDictionary()
_unchecked: WeakKeyDictionary[ClientSession, str] = WeakKeyDictionary()


def _callable_attr(owner: object, name: str, label: str, missing: list[str]) -> Any:
    value = getattr(owner, name, None)
    if not callable(value):
        missing.append(label)
        return None
    return value


def _check_process() -> _Process:
    lean: list[str] = []
    session_module = importlib.import_module(_SESSION_MODULE)
    clamp = _callable_attr(
        session_module, "_clamp_inbound_ttl", f"{_SESSION_MODULE}._clamp_inbound_ttl", lean
    )
    span = inject = None
    try:
        otel = importlib.import_module(_OTEL_MODULE)
    except ImportError:
        lean.append(_OTEL_MODULE)
    else:
        span = _callable_attr(otel, "otel_span", f"{_OTEL_MODULE}.otel_span", lean)
        inject = _callable_attr(
            otel, "inject_trace_context", f"{_OTEL_MODULE}.inject_trace_context", lean
        )
    _callable_attr(JSONRPCDispatcher, "_allocate_id", "JSONRPCDispatcher._allocate_id", lean)
    hook: list[str] = []
    if not inspect.iscoroutinefunction(getattr(Client, "_build_session", None)):
        hook.append("Client._build_session")
    capabilities: list[str] = []
    _callable_attr(
        ClientSession, "_build_capabilities", "ClientSession._build_capabilities", capabilities
    )
    missing = tuple(
        (path, parts[0])
        for path, parts in ((LEAN_GET, lean), (SESSION_HOOK, hook), (CAPABILITY_HOOK, capabilities))
        if parts
    )
    paths = FastPaths(
        lean_get=not lean,
        unchecked_send=True,  # its parts live on each session: see unchecked_send()
        session_hook=not hook,
        capability_hook=not capabilities and not hook,  # installed by the session hook
        missing=missing,
    )
    for path, part in missing:
        _warn_once(path, part)
    return _Process(paths, clamp, span, inject)


def _proc() -> _Process:
    global _process
    if _process is None:
        _process = _check_process()
    return _process


def fast_paths() -> FastPaths:
    """Which fast paths this process's SDK allows (checked on first use, then kept)."""
    return _proc().paths


def recheck() -> FastPaths:
    """Forget every check, warning and count, and check again: for a process whose SDK
    changed under it (the tests remove parts on purpose)."""
    global _process
    _process = None
    _warned.clear()
    _lean.clear()
    _unchecked.clear()
    FALLBACKS.lean_get = FALLBACKS.unchecked_send = 0
    FALLBACKS.session_hook = FALLBACKS.capability_hook = 0
    FALLBACKS.reasons.clear()
    return fast_paths()


def _warn_once(path: str, part: str) -> None:
    if part in _warned:
        return
    _warned.add(part)
    log.warning("MCP SDK part %s is missing or changed: %s takes the public SDK path", part, path)


def fell_back(path: str, part: str) -> None:
    """Count one use of the public SDK path instead of ``path`` (``part``: what is missing)."""
    setattr(FALLBACKS, path, getattr(FALLBACKS, path) + 1)
    FALLBACKS.reasons[path] = part
    _warn_once(path, part)


def _session_stamp(session: ClientSession) -> Stamp | str:
    stamp = getattr(session, "_stamp", None)
    return stamp if callable(stamp) else "ClientSession._stamp"


# -- the lean tasks/get ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LeanParts:
    """What the lean ``tasks/get`` uses of one session: its stamp and its JSON-RPC dispatcher
    (id sequence, pending requests, closed flag), plus the SDK's span and trace helpers."""

    stamp: Stamp
    dispatcher: JSONRPCDispatcher
    otel_span: OtelSpan
    inject_trace_context: Callable[[dict[str, Any]], None]

    def closed(self) -> bool:
        closed: bool = self.dispatcher._closed
        return closed

    def next_id(self) -> int:
        """The next id of the session's own sequence that no pending request holds."""
        dispatcher = self.dispatcher
        request_id: int = dispatcher._allocate_id()
        while request_id in dispatcher._pending:
            request_id = dispatcher._allocate_id()
        return request_id


def lean_parts(session: ClientSession) -> LeanParts | str:
    """The lean path's parts of ``session``, or the name of the part it lacks (then the
    caller takes the public path and reports it with :func:`fell_back`)."""
    process = _proc()
    verdict = _lean.get(session)
    if verdict is None:
        verdict = _check_lean(session, process)
        _lean[session] = verdict
    if verdict != _OK:
        return verdict
    assert process.otel_span is not None and process.inject_trace_context is not None
    dispatcher = session._dispatcher
    assert isinstance(dispatcher, JSONRPCDispatcher)
    return LeanParts(session._stamp, dispatcher, process.otel_span, process.inject_trace_context)


def _check_lean(session: ClientSession, process: _Process) -> str:
    if not process.paths.lean_get:
        return process.paths.reason(LEAN_GET) or LEAN_GET
    stamp = _session_stamp(session)
    if isinstance(stamp, str):
        return stamp
    dispatcher = getattr(session, "_dispatcher", None)
    if not isinstance(dispatcher, JSONRPCDispatcher):
        return "ClientSession._dispatcher"
    if not isinstance(getattr(dispatcher, "_pending", None), dict):
        return "JSONRPCDispatcher._pending"
    if not isinstance(getattr(dispatcher, "_closed", None), bool):
        return "JSONRPCDispatcher._closed"
    return _OK


def clamp_inbound_ttl(raw: dict[str, Any]) -> None:
    """The SDK's floor of a negative ``ttlMs`` (only reached while the lean path is on)."""
    clamp = _proc().clamp_ttl
    assert clamp is not None
    clamp(raw)


# -- the unchecked send (2025-11-25 task-augmented tools/call) ------------------------------------
@dataclass(frozen=True, slots=True)
class UncheckedSend:
    """``ClientSession.send_request`` up to the dispatcher, without its per-method result check."""

    stamp: Stamp
    send_raw_request: Callable[..., Any]

    async def send(self, data: dict[str, Any], timeout: float) -> Any:
        opts: CallOptions = {"timeout": timeout}
        self.stamp(data, opts)
        return await self.send_raw_request(data["method"], data.get("params"), opts)


def unchecked_send(session: ClientSession) -> UncheckedSend | str:
    """The unchecked send of ``session``, or the name of the part it lacks."""
    verdict = _unchecked.get(session)
    if verdict is None:
        verdict = _check_unchecked(session)
        _unchecked[session] = verdict
    if verdict != _OK:
        return verdict
    return UncheckedSend(session._stamp, session._dispatcher.send_raw_request)


def _check_unchecked(session: ClientSession) -> str:
    stamp = _session_stamp(session)
    if isinstance(stamp, str):
        return stamp
    dispatcher = getattr(session, "_dispatcher", None)
    if not inspect.iscoroutinefunction(getattr(dispatcher, "send_raw_request", None)):
        return "ClientSession._dispatcher"
    return _OK


# -- hooks on each new SDK session ----------------------------------------------------------------
class HookedClient(Client):
    """The SDK client, handing each session it builds to :meth:`session_built` before the
    session is entered (the SDK's private ``Client._build_session``). Without that part the
    client connects as the plain SDK client does."""

    def session_built(self, session: ClientSession) -> None:
        """Adjust a new, not yet entered session (subclasses)."""

    async def __aenter__(self) -> Client:
        paths = fast_paths()
        if not paths.session_hook:
            fell_back(SESSION_HOOK, paths.reason(SESSION_HOOK) or SESSION_HOOK)
        return await super().__aenter__()

    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        session = await super()._build_session(exit_stack)
        self.session_built(session)
        return session


def wrap_capabilities(
    session: ClientSession, transform: Callable[[ClientCapabilities], ClientCapabilities]
) -> bool:
    """Pass every capability ad ``session`` builds (``server/discover``, each request's stamp,
    the legacy ``initialize``) through ``transform``; False when the SDK's builder is missing
    (the SDK's own ad then goes out unchanged)."""
    build = getattr(session, "_build_capabilities", None)
    if not fast_paths().capability_hook or not callable(build):
        fell_back(CAPABILITY_HOOK, "ClientSession._build_capabilities")
        return False

    def transformed(version: str) -> ClientCapabilities:
        built: ClientCapabilities = build(version)
        return transform(built)

    # One hook, on this session only.
    setattr(session, "_build_capabilities", transformed)  # noqa: B010
    return True
