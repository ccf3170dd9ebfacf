"""Which outer run a gateway call is recorded under.

- A request naming its UHP response (:mod:`bridge.gateway.identity` headers) joins this
  principal's run of that response — the host's own served run, a remote run, or, when the
  ledger has none yet, a run the gateway registers under that response id. The lookup is
  scoped to the principal: another principal's run with the same id is never found.
- A call repeating a recorded operation id stays in the run that recorded it (so a client
  that comes back on another session still replays its call instead of being refused).
- Otherwise each client session is its own run (``response_id`` ``gateway:<session>``).
"""

from __future__ import annotations

import anyio

from bridge.facade import Bridge
from bridge.gateway.identity import OuterIdentity, invalid_params

GATEWAY_HARNESS = "gateway"


class GatewayRuns:
    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self._db = bridge._runner  # the bridge's own runner: one runner per ledger
        self._known: dict[tuple[str, str], str] = {}  # (principal, response id) -> run ref
        self._lock = anyio.Lock()

    async def run_for(
        self,
        principal: str,
        session: str,
        outer: OuterIdentity | None,
        operation_id: str | None,
    ) -> str:
        if outer is not None:
            return await self._outer_run(principal, outer)
        if operation_id is not None:
            tenant = self.bridge._ledger.for_principal(principal)
            recorded = await self._db(tenant.find_dispatch, operation_id)
            if recorded is not None:
                return recorded.run_ref
        return await self._registered(principal, f"{GATEWAY_HARNESS}:{session}", None)

    async def _outer_run(self, principal: str, outer: OuterIdentity) -> str:
        tenant = self.bridge._ledger.for_principal(principal)
        runs = await self._db(tenant.find_runs_by_response_id, outer.response_id)
        if len(runs) > 1:
            raise invalid_params(
                f"response {outer.response_id!r} is recorded on several UHP servers"
            )
        if runs:
            (run,) = runs
            if outer.session_id and run.session_id and outer.session_id != run.session_id:
                raise invalid_params(f"response {outer.response_id!r} belongs to another session")
            return run.ref
        return await self._registered(principal, outer.response_id, outer.session_id)

    async def _registered(self, principal: str, response_id: str, session_id: str | None) -> str:
        """Recorded once (the ledger's run is idempotent on its response id, per principal)."""
        key = (principal, response_id)
        async with self._lock:
            if key not in self._known:
                run = await self.bridge.register_served_run(
                    principal,
                    response_id=response_id,
                    session_id=session_id,
                    harness_id=None,
                    harness=GATEWAY_HARNESS,
                )
                self._known[key] = run.ref
            return self._known[key]
