"""The gateway's own records in its bridge's ledger: the task handles it gives its clients and
the newest run it made for an identity (:mod:`bridge.gateway._runs`). Package-internal: a host
has no use for either; everything else the gateway reads through :meth:`bridge.Bridge.read`."""

from __future__ import annotations

from bridge._facade import Bridge
from bridge._ledger.reads.views import RunView


class GatewayRecords:
    """Through the bridge's own ledger runner (one runner per ledger), as its reads are."""

    def __init__(self, bridge: Bridge) -> None:
        self._ledger, self._db = bridge._ledger, bridge._db

    async def record_handle(self, principal: str, handle: str, task_ref: str, op_ref: str) -> None:
        handles = self._ledger.for_principal(principal).gateway_handles
        await self._db(handles.record_gateway_handle, handle, task_ref, op_ref)

    async def task_of(self, principal: str, handle: str) -> str | None:
        """The task a handle names (None: unknown, or another principal's)."""
        handles = self._ledger.for_principal(principal).gateway_handles
        return await self._db(handles.gateway_handle_task, handle)

    async def latest_run(
        self, principal: str, server: str, identity: str, separator: str
    ) -> RunView | None:
        """The newest run on ``server`` under ``identity`` (or ``identity<separator><n>``)."""
        reads = self._ledger.for_principal(principal).reads
        return await self._db(reads.latest_run_of, server, identity, separator)
