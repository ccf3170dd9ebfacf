"""An upstream's progress on a call, relayed to whoever made the call.

A server may send ``notifications/progress`` while it answers a ``tools/call`` directly. The
SDK hands them to the callback given with that one request, so the relay is set for the call
in the caller's own context (:func:`relaying_progress`, a context variable: concurrent calls
each keep theirs) and the requester passes it with the request. Nothing is recorded: progress
is a courtesy to a waiting client, not state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from mcp.shared.dispatcher import ProgressFnT

#: ``(progress, total, message)``, as the SDK reports an upstream's progress.
ProgressRelay = ProgressFnT

_RELAY: ContextVar[ProgressRelay | None] = ContextVar("bridge_progress_relay", default=None)


@contextmanager
def relaying_progress(relay: ProgressRelay | None) -> Iterator[None]:
    """Calls made inside the block relay their upstream's progress to ``relay``."""
    token = _RELAY.set(relay)
    try:
        yield
    finally:
        _RELAY.reset(token)


def progress_relay() -> ProgressRelay | None:
    """The relay of the call being made here, if its caller set one."""
    return _RELAY.get()
