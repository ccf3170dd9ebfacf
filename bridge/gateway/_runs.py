"""Which outer run a gateway call is recorded under.

- A request naming its UHP response (:mod:`bridge.gateway._identity` headers) joins this
  principal's run of that response — the host's own served run, a remote run, or, when the
  ledger has none yet, a run the gateway registers under that response id. The lookup is
  scoped to the principal: another principal's run with the same id is never found.
- A call repeating a recorded operation id stays in the run that recorded it (so a client
  that comes back on another session still replays its call instead of being refused),
  even when that run has ended: a replay sends nothing new. With an outer identity, only
  when that run is one the gateway made for the same response id (any generation).
- Otherwise each client session is its own run (``response_id`` ``gateway:<session>``).

A run the gateway makes ends once its calls have ended (:mod:`bridge.gateway._run_ends`). A
later call under the same identity (session or response id) then opens the identity's next
run: ``<identity>#2``, ``#3``, … (``#`` is in neither a response id nor a session name, so
these never meet an id a client sends). A run the gateway only joins is never ended by it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from bridge._facade import Bridge, GatewayRecords
from bridge._ledger.reads.views import RunView
from bridge.gateway._identity import OuterIdentity, invalid_params
from bridge.gateway._run_ends import GATEWAY_HARNESS, GATEWAY_SERVER, RunEnds

__all__ = ["GATEWAY_HARNESS", "GATEWAY_SERVER", "GENERATION_SEPARATOR", "GatewayRuns"]

GENERATION_SEPARATOR = "#"


def _generation(run: RunView, identity: str) -> int:
    suffix = (run.response_id or "").removeprefix(identity + GENERATION_SEPARATOR)
    return int(suffix) if run.response_id != identity and suffix.isdigit() else 1


class GatewayRuns:
    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self.records = GatewayRecords(bridge)
        self.ends = RunEnds(bridge)
        # (principal, identity) -> (run ref, generation) of the identity's newest run
        self._current: dict[tuple[str, str], tuple[str, int]] = {}
        self._lock = anyio.Lock()

    @asynccontextmanager
    async def joined(
        self,
        principal: str,
        session: str,
        outer: OuterIdentity | None,
        operation_id: str | None,
    ) -> AsyncIterator[str]:
        """The run the call is recorded under, held open while the request is inside it."""
        run_ref = await self.run_for(principal, session, outer, operation_id)
        try:
            yield run_ref
        finally:
            await self.ends.release(principal, run_ref)

    async def run_for(
        self,
        principal: str,
        session: str,
        outer: OuterIdentity | None,
        operation_id: str | None,
    ) -> str:
        """The run (held: pair with ``ends.release``; :meth:`joined` does both)."""
        recorded = None
        if operation_id is not None:
            dispatch = await self.bridge.read(principal, lambda r: r.operation(operation_id))
            recorded = dispatch.run_ref if dispatch is not None else None
        if recorded is not None and (
            outer is None or await self._of_identity(principal, recorded, outer.response_id)
        ):
            self.ends.hold(recorded)
            run_ref = recorded
        elif outer is not None:
            run_ref = await self._outer_run(principal, outer)
        else:
            run_ref = await self._gateway_run(principal, f"{GATEWAY_HARNESS}:{session}", None)
        self.ends.watch(principal, run_ref)
        return run_ref

    async def _of_identity(self, principal: str, run_ref: str, response_id: str) -> bool:
        """Whether the run is one the gateway made for ``response_id`` (any generation)."""
        run = await self.bridge.read(principal, lambda r: r.run(run_ref))
        base = (run.response_id or "").partition(GENERATION_SEPARATOR)[0]
        return run.uhp_server == GATEWAY_SERVER and base == response_id

    async def _outer_run(self, principal: str, outer: OuterIdentity) -> str:
        runs = await self.bridge.read(principal, lambda r: r.runs(response_id=outer.response_id))
        if len(runs) > 1:
            raise invalid_params(
                f"response {outer.response_id!r} is recorded on several UHP servers"
            )
        if runs:
            (run,) = runs
            if outer.session_id and run.session_id and outer.session_id != run.session_id:
                raise invalid_params(f"response {outer.response_id!r} belongs to another session")
            if run.uhp_server != GATEWAY_SERVER:  # the host's or a remote run: joined as is
                self.ends.hold(run.ref)
                return run.ref
        return await self._gateway_run(principal, outer.response_id, outer.session_id)

    async def _gateway_run(self, principal: str, identity: str, session_id: str | None) -> str:
        """The identity's open run, or its next one (registered once: the ledger's run is
        idempotent on its response id, per principal); held before anything can end it."""
        key = (principal, identity)
        async with self._lock:
            current = self._current.get(key)
            if current is None:
                latest = await self.records.latest_run(
                    principal, GATEWAY_SERVER, identity, GENERATION_SEPARATOR
                )
                if latest is not None:
                    current = (latest.ref, _generation(latest, identity))
                    if latest.is_terminal:
                        self.ends.mark_ended(latest.ref)
            if current is None or self.ends.is_ended(current[0]):
                generation = current[1] + 1 if current is not None else 1
                response_id = (
                    identity if generation == 1 else f"{identity}{GENERATION_SEPARATOR}{generation}"
                )
                run = await self.bridge.register_served_run(
                    principal,
                    response_id=response_id,
                    session_id=session_id,
                    harness_id=None,
                    harness=GATEWAY_HARNESS,
                )
                if self._current.get(key) is not None:
                    self.ends.forget(self._current[key][0])  # keeps memory to open runs
                current = (run.ref, generation)
            self._current[key] = current
            self.ends.hold(current[0])  # no await since the check: nothing ended it between
            return current[0]
