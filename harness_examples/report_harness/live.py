"""The report harness's live runs: a response being executed by this process, the events of
one step, a response's stored event log as the serving kit follows it, and the small JSON
helpers every event and snapshot goes through."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic_core

from bridge.uhp.serving import ChangeSignal, LoggedEvent
from harness_examples.report_harness.config import HarnessEntry
from harness_examples.report_harness.store import TERMINAL

if TYPE_CHECKING:
    from harness_examples.report_harness.runtime import Runtime


@dataclass
class Events:
    """Events of one step, collected to be appended together (:meth:`Runtime.emit_all`)."""

    items: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def add(self, type_: str, **payload: Any) -> None:
        self.items.append((type_, payload))


@dataclass(eq=False)
class LiveRun:
    """A response being executed by this process."""

    id: str
    principal: str
    harness: HarnessEntry
    body: dict[str, Any]
    request: dict[str, Any]
    next_seq: int
    step: int
    run_ref: str | None
    bridge_cursor: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    signal: ChangeSignal = field(default_factory=ChangeSignal)  # wakes this run's streams
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    forwarder: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    finishing: bool = False

    @property
    def terminal(self) -> bool:
        return self.body["status"] in TERMINAL


def stop_if_cancel_requested(run: LiveRun) -> None:
    """Cancellation is level-triggered: the task's own ``cancel()`` is one-shot (it misses a
    task that has not started yet, or one that an awaited library absorbed), so every step and
    delta checks the request too, and ``execute`` finishes the response as cancelled."""
    if run.cancel_requested:
        raise asyncio.CancelledError


class Incomplete(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def to_json(value: Any) -> str:
    """A JSON value as compact text, by pydantic-core's encoder: 2-3 times faster than the
    standard library's on a response body, and every event and snapshot is encoded once."""
    return pydantic_core.to_json(value).decode()


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (what a response, its items and parts are): through
    pydantic-core's encoder and decoder, several times cheaper than ``copy.deepcopy``."""
    return pydantic_core.from_json(pydantic_core.to_json(value))


class StoredLog:
    """A response's event log as the kit follows it: the rows in the store, woken by the live
    run of this process (an ``EventSource``)."""

    def __init__(self, runtime: Runtime, response_id: str) -> None:
        self.runtime = runtime
        self.response_id = response_id

    async def events_after(self, after_seq: int) -> Sequence[LoggedEvent]:
        rows = await self.runtime.db(self.runtime.store.events_after, self.response_id, after_seq)
        return [LoggedEvent(seq, type_, data) for seq, type_, data in rows]

    def live_signal(self) -> asyncio.Event | None:
        live = self.runtime.live.get(self.response_id)
        return live.signal.current if live is not None else None

    async def closed(self) -> bool:
        # Not live here: finished, gone, or about to be resumed here (then it is looked at
        # again).
        stored = await self.runtime.db(self.runtime.store.get, self.response_id)
        return stored is None or stored.terminal
