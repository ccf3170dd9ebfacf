"""A response's event log and how a stream follows it.

The log is the source of truth of a stream: every event gets the next ``sequence_number``
(0, 1, 2, ... no gaps) when it is appended, and every stream, first or resumed, is a read of
the log from some sequence on, live until the terminal event. :func:`follow_log` does that
read for any :class:`EventSource`: :class:`MemoryEventLog` in process, or an app's own durable
log (a database table) with the app's live runs as the change signal.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bridge.uhp._models import TERMINAL_EVENT_TYPES
from bridge.uhp.serving._sse import KEEPALIVE_FRAME, sse_frame

#: A cancelled task ends with ``response.failed`` whose ``response.status`` is ``cancelled``.
TERMINAL_EVENT_FOR_STATUS = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    "cancelled": "response.failed",
}
TERMINAL_STATUSES = frozenset(TERMINAL_EVENT_FOR_STATUS)
#: The longest pause between two looks at a log that is neither live here nor closed.
NOT_LIVE_POLL_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One event of a log: its sequence number, its type and the event as JSON text."""

    seq: int
    type: str
    data: str

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES

    def frame(self) -> bytes:
        """The SSE frame: ``id: <seq>`` and ``data: <json>``."""
        return sse_frame(self.data, id=self.seq)


class ChangeSignal:
    """Wakes every follower of a log when it grows (or anything they wait on changes).

    A follower takes :attr:`current` *before* reading the log and waits on it afterwards, so
    an append between the read and the wait is never missed.
    """

    def __init__(self) -> None:
        self.current = asyncio.Event()

    def notify(self) -> None:
        self.current.set()
        self.current = asyncio.Event()


class EventSource(Protocol):
    """What :func:`follow_log` reads."""

    async def events_after(self, after_seq: int) -> Sequence[LoggedEvent]:
        """The events with ``seq > after_seq``, in order."""
        ...

    def live_signal(self) -> asyncio.Event | None:
        """The event set at the next append, or None when nothing in this process appends."""
        ...

    async def closed(self) -> bool:
        """Asked when not live: True when the log will not grow any more (or is gone)."""
        ...


class MemoryEventLog:
    """An in-process log for one response (an :class:`EventSource`)."""

    def __init__(self) -> None:
        self.events: list[LoggedEvent] = []
        self.signal = ChangeSignal()

    def append(self, type_: str, **payload: Any) -> dict[str, Any]:
        """Append the event with the next sequence number; wake the followers."""
        event = {"type": type_, "sequence_number": len(self.events), **payload}
        self.events.append(LoggedEvent(len(self.events), type_, json.dumps(event)))
        self.signal.notify()
        return event

    @property
    def terminal(self) -> bool:
        return bool(self.events) and self.events[-1].terminal

    async def events_after(self, after_seq: int) -> Sequence[LoggedEvent]:
        return self.events[after_seq + 1 :]

    def live_signal(self) -> asyncio.Event | None:
        return None if self.terminal else self.signal.current

    async def closed(self) -> bool:
        return self.terminal


async def follow_log(
    source: EventSource,
    start: int,
    *,
    keepalive_s: Callable[[], float],
    not_live_poll_s: float = 0.2,
    not_live_poll_max_s: float = NOT_LIVE_POLL_MAX_S,
) -> AsyncIterator[LoggedEvent | None]:
    """The log from sequence ``start`` on, live until (and including) the terminal event.

    Yields None where a keep-alive is due (nothing appended for ``keepalive_s()`` seconds).
    The log is read again only when its live signal says it grew: a keep-alive is a timer
    write and reads nothing. A log that is neither live nor closed (a run about to be resumed,
    or one another process serves) is looked at again after ``not_live_poll_s``, backing off
    to ``not_live_poll_max_s`` while it stays so.
    """
    after = start - 1
    not_live_wait = not_live_poll_s
    while True:
        signal = source.live_signal()  # taken before reading: no append slips in between
        for event in await source.events_after(after):
            after = event.seq
            yield event
            if event.terminal:
                return
        if signal is None:
            if await source.closed():
                return
            await asyncio.sleep(not_live_wait)
            not_live_wait = min(not_live_wait * 2, not_live_poll_max_s)
            continue
        not_live_wait = not_live_poll_s
        while source.live_signal() is signal:  # replaced (or gone) once the log grew
            try:
                await asyncio.wait_for(signal.wait(), keepalive_s())
            except TimeoutError:
                yield None


async def sse_frames(
    source: EventSource, start: int, *, keepalive_s: Callable[[], float]
) -> AsyncIterator[bytes]:
    """:func:`follow_log` as SSE frames, keep-alive comments included."""
    async for event in follow_log(source, start, keepalive_s=keepalive_s):
        yield KEEPALIVE_FRAME if event is None else event.frame()
