"""Wakes waiters when this process commits events for a run (subscribers, ``wait_for``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable

import anyio

from bridge.ledger.store import Ledger

# Events written by other processes send no notification: waiters look again this often.
POLL_S = 0.25


class CommitNotifier:
    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._waiting: dict[str, list[anyio.Event]] = {}
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        ledger.add_listener(self._on_commit)

    def close(self) -> None:
        self._ledger.remove_listener(self._on_commit)

    def _on_commit(self, _principal: str, run_ref: str, _seq: int) -> None:
        if threading.get_ident() == self._loop_thread:
            self._fire(run_ref)
            return
        with contextlib.suppress(RuntimeError):  # loop gone: pollers still see the event
            anyio.from_thread.run_sync(self._fire, run_ref, token=self._token)

    def _fire(self, run_ref: str) -> None:
        for event in self._waiting.pop(run_ref, ()):
            event.set()

    async def wait(self, run_refs: str | Iterable[str], timeout: float) -> None:
        """Until a commit on any of these runs, or ``timeout`` seconds."""
        refs = [run_refs] if isinstance(run_refs, str) else list(run_refs)
        event = anyio.Event()
        for ref in refs:
            self._waiting.setdefault(ref, []).append(event)
        try:
            with anyio.move_on_after(timeout):
                await event.wait()
        finally:
            for ref in refs:
                waiters = self._waiting.get(ref)
                if waiters is not None and event in waiters:
                    waiters.remove(event)
                    if not waiters:
                        del self._waiting[ref]
