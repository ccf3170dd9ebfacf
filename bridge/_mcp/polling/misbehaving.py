"""Naming a server that took a ``tasks/get`` and answered it badly, by kind.

A reply that is not JSON-RPC, a 429, a reply about another task, or none completed within the
request timeout (a trickle, an SSE stream that never delivers the response) all come from a
server that is reachable: reporting them as ``server.unreachable`` after the grace period
would send an operator to the network instead of to the server. Each kind is recorded at once
as an ``anomaly`` ``misbehaving_server.<kind>``, once per kind until a good reply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from bridge._ledger.store import TenantLedger
from bridge._mcp.failures import Failure
from bridge._mcp.polling.watches import Watch

ANOMALY_PREFIX = "misbehaving_server."


async def name_misbehaviour(
    db: Callable[..., Awaitable[Any]], tenant: TenantLedger, watch: Watch, failure: Failure
) -> None:
    """Record ``failure``'s misbehaviour for ``watch`` unless that kind was named already;
    the handle is reachable, so its unreachable clock stops."""
    assert failure.misbehaviour is not None
    watch.failing_since_ms = None
    if watch.last_misbehaviour is failure.misbehaviour:
        return
    watch.last_misbehaviour = failure.misbehaviour
    await db(
        tenant.runs.record_anomaly,
        watch.view.run_ref,
        f"{ANOMALY_PREFIX}{failure.misbehaviour.value}",
        f"tasks/get: {failure.detail[:200]}",
        task_ref=watch.view.ref,
        lease=watch.lease,
    )
