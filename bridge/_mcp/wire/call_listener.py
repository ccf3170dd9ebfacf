"""An upstream's log messages and elicitations on a directly answered call, handed to
whoever made the call.

The SDK hands a server's ``notifications/message`` and ``elicitation/create`` to callbacks of
the whole connection, without saying which request they came with. Over streamable HTTP they
come on the SSE reply of that request's POST, so the call is marked: the requester puts a
random mark in the ``tools/call``'s ``_meta`` (:func:`marked_meta`), the HTTP transport takes
it out again before sending and taps the reply (:mod:`bridge._mcp.wire.call_tap`): a log
message goes to the call's listener, an elicitation gets the mark in its own ``_meta`` so the
elicitation callback finds the listener (:func:`listener_of`). A call made with no listener
is sent unmarked; over stdio nothing is tapped (the connection's callbacks answer).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import mcp_types

#: The ``_meta`` key of the mark (never reaches a server: the transport removes it).
MARK_META = "io.github.uhp-bridge/call-mark"

LogListener = Callable[[mcp_types.LoggingMessageNotificationParams], Awaitable[None]]
ElicitListener = Callable[
    [mcp_types.ElicitRequestParams], Awaitable[mcp_types.ElicitResult | mcp_types.ErrorData]
]


@dataclass(frozen=True, slots=True)
class CallListener:
    """What one caller hears of its call: log messages, and elicitations to answer."""

    log: LogListener
    elicit: ElicitListener
    # The least level of the messages asked for (a 2026-07-28 server sends log messages only
    # to a request that names one in its ``_meta``; earlier servers go by logging/setLevel).
    level: mcp_types.LoggingLevel = "debug"


_LISTENER: ContextVar[CallListener | None] = ContextVar("bridge_call_listener", default=None)
_MARKED: dict[str, CallListener] = {}


@contextmanager
def listening(listener: CallListener | None) -> Iterator[None]:
    """Calls made inside the block tell ``listener`` about their upstream's messages."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


@contextmanager
def marked_meta(meta: Mapping[str, Any] | None) -> Iterator[dict[str, Any] | None]:
    """``meta`` with a mark for this call's listener (unchanged without one), the mark
    registered while the block runs, and the listener's log level asked for."""
    listener = _LISTENER.get()
    if listener is None:
        yield None if meta is None else dict(meta)
        return
    mark = secrets.token_urlsafe(16)
    _MARKED[mark] = listener
    try:
        yield {mcp_types.LOG_LEVEL_META_KEY: listener.level, **(meta or {}), MARK_META: mark}
    finally:
        _MARKED.pop(mark, None)


def listener_for_mark(mark: object) -> CallListener | None:
    return _MARKED.get(mark) if isinstance(mark, str) else None


def listener_of(meta: Mapping[str, Any] | None) -> CallListener | None:
    """The listener of the call an elicitation came with (its ``_meta`` carries the mark)."""
    return listener_for_mark((meta or {}).get(MARK_META))
