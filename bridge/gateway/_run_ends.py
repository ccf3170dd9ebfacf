"""When a run the gateway made ends: once every call in it has ended, and no request is
still on its way into it.

The gateway is the harness of the runs it makes (``local:gateway``): no UHP server reports
their status, so it reports it, as a harness reports its served response's
(:meth:`bridge.Run.record_status`: the ``outer.terminal`` event, the outer-end
policies). How the calls ended decides how the run did
(:func:`bridge._ledger.reads.call_states.ending_of`): ``completed``, ``failed``,
``cancelled``, or ``incomplete`` when an outcome is unknown or a task was lost. A call in
flight, or waiting on input, keeps the run open. Runs the gateway only joins (a host's
served run, a remote run) are never ended here.

Each open run is watched: its events that end a call (a task's end or loss, a call's
result or unknown outcome) make it look again; so does each request that leaves it. A
request holds the run from the moment it is admitted until it returns, so a run is never
ended between a call's admission and its first record. On start, the open runs of a
previous gateway are watched again (and ended if their calls ended meanwhile).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import cast

import anyio
from anyio.abc import TaskGroup

from bridge import events as ev
from bridge._facade import Bridge
from bridge._ledger.reads.call_states import calls_of, ending_of
from bridge._lifecycle import OuterStatus

GATEWAY_HARNESS = "gateway"
GATEWAY_SERVER = f"local:{GATEWAY_HARNESS}"  # the uhp_server of every run the gateway makes

# Events after which a call of the run may have ended.
ENDS_A_CALL = (
    ev.TaskTerminal,
    ev.TaskLost,
    ev.TaskDetached,
    ev.CallResult,
    ev.CallUnknownOutcome,
)

logger = logging.getLogger(__name__)


class RunEnds:
    """Holds, watches and ends the gateway's runs (one per process: the ledger's gateway)."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self._holds: Counter[str] = Counter()  # run ref -> requests inside it now
        self._admitted: Counter[str] = Counter()  # run ref -> requests ever admitted
        self._ended: set[str] = set()  # ended (by this process, or found ended)
        self._watched: set[str] = set()
        self._group: TaskGroup | None = None

    # -- admission (synchronous: atomic on the event loop) ---------------------------------
    def is_ended(self, run_ref: str) -> bool:
        return run_ref in self._ended

    def mark_ended(self, run_ref: str) -> None:
        """Found ended in the ledger (by an earlier process)."""
        self._ended.add(run_ref)

    def forget(self, run_ref: str) -> None:
        """An ended run its identity moved on from: a replay into it reads the ledger again."""
        if run_ref in self._ended and not self._holds[run_ref]:
            self._ended.discard(run_ref)

    def hold(self, run_ref: str) -> None:
        """A request enters the run: it is not ended until :meth:`release`."""
        self._holds[run_ref] += 1
        self._admitted[run_ref] += 1

    async def release(self, principal: str, run_ref: str) -> None:
        """The request left the run: end the run if that was its last open call."""
        self._holds[run_ref] -= 1
        if self._holds[run_ref] <= 0:
            del self._holds[run_ref]
        with anyio.CancelScope(shield=True):  # a cut-off request still leaves the run
            await self.settle(principal, run_ref)

    # -- watching --------------------------------------------------------------------------
    async def start(self, group: TaskGroup) -> None:
        """Watch (and, if their calls have ended, end) the open runs a previous gateway left."""
        self._group = group
        for principal in self.bridge.principals:
            runs = self.bridge.read(principal, lambda r: r.runs(open_only=True, limit=100_000))
            for run in await runs:
                if run.uhp_server == GATEWAY_SERVER:
                    self.watch(principal, run.ref)

    def watch(self, principal: str, run_ref: str) -> None:
        """Follow the run's events until it ends (once per run; a no-op before :meth:`start`)."""
        if self._group is None or run_ref in self._watched or run_ref in self._ended:
            return
        self._watched.add(run_ref)
        self._group.start_soon(self._watch, principal, run_ref)

    async def _watch(self, principal: str, run_ref: str) -> None:
        try:
            after = (await self.bridge.read(principal, lambda r: r.run(run_ref))).event_count
            if await self.settle(principal, run_ref):
                return
            events = cast(
                AsyncGenerator[ev.BridgeEvent, None],
                self.bridge.run(principal, run_ref).subscribe(after_seq=after),
            )
            async with aclosing(events) as stream:
                async for event in stream:
                    if isinstance(event, ev.OuterTerminal):
                        return
                    if isinstance(event, ENDS_A_CALL) and await self.settle(principal, run_ref):
                        return
        finally:
            self._watched.discard(run_ref)

    # -- ending ----------------------------------------------------------------------------
    async def settle(self, principal: str, run_ref: str) -> bool:
        """End the run if it is the gateway's, nothing holds it and all its calls have
        ended; True once it has ended."""
        while True:
            if run_ref in self._ended:
                return True
            if self._holds[run_ref] > 0:
                return False
            admitted = self._admitted[run_ref]
            run = await self.bridge.read(principal, lambda r: r.run(run_ref))
            if run.uhp_server != GATEWAY_SERVER:
                self._admitted.pop(run_ref, None)  # never ended here: nothing to count
                return False
            if run.is_terminal:
                self._ended.add(run_ref)
                return True
            calls = await self.bridge.read(principal, lambda r: r.calls(run_ref))
            ending = ending_of(calls_of(calls, [call.task for call in calls if call.task]))
            if ending is None:
                return False
            if self._holds[run_ref] > 0 or self._admitted[run_ref] != admitted:
                continue  # a request came in while we read: look again
            self._ended.add(run_ref)  # from here no request is admitted into it
            self._admitted.pop(run_ref, None)
            try:
                await self.bridge.run(principal, run_ref).record_status(
                    ending.status, error=ending.error
                )
            except BaseException:
                self._ended.discard(run_ref)
                raise
            if ending.status is not OuterStatus.COMPLETED:
                logger.info("gateway: run %s ended %s", run_ref, ending.status.value)
            return True
