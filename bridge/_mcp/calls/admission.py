"""Admission checks: was a call whose outcome is unknown taken by the server?

"Request sent, no handle": the connection broke (or the reply was garbled) after a
``tools/call`` left, so nobody can tell whether the server started the work. For a
consequential tool, repeating it blindly could do the work twice. The host may register an
*admission check* per server or tool, an async callable the bridge asks before any retry:

- ``not_admitted``: the server never took it; a retry is safe and is sent (when the policy
  retries) carrying the same operation id;
- ``admitted``: it was taken without a handle reaching the bridge; never retried;
- ``unknown``: stays unknown until the host resolves it (``Bridge.resolve_unknown_outcome``).

Each answer is recorded (``call.admission_checked``). The check sees the call's
:class:`~bridge.CallView`: principal, server, tool, operation id, argument digest and when the
call was sent (``created_at_ms``); never a raw task id (there is none) nor the arguments. A
server that accepts a duplicate-prevention key (``McpServerConfig.operation_id_meta_key``) gets
the operation id in ``params._meta`` of every ``tools/call``, retries included, so a wrong
``not_admitted`` still cannot do the work twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from bridge._ledger.reads.views import CallView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import TenantLedger
from bridge._lifecycle import Admission

log = logging.getLogger(__name__)


AdmissionCheck = Callable[[CallView], Awaitable[Admission]]


@dataclass(frozen=True, slots=True)
class AdmissionChecks:
    """The host's admission checks: per tool (``"server.tool"`` or ``"tool"``), then per
    server. A tool with none is never retried after an unknown outcome unless it is safe to
    repeat (read-only, idempotent, or listed in ``retry_safe_tools``)."""

    per_tool: Mapping[str, AdmissionCheck] = field(default_factory=dict)
    per_server: Mapping[str, AdmissionCheck] = field(default_factory=dict)

    def for_tool(self, server: str, tool: str) -> AdmissionCheck | None:
        """The check for ``server``'s ``tool``: per ``server.tool``, then per tool, then per server
        (None: no check, the outcome stays unknown)."""
        return (
            self.per_tool.get(f"{server}.{tool}")
            or self.per_tool.get(tool)
            or self.per_server.get(server)
        )


async def ask_admission(
    check: AdmissionCheck, dispatch: CallView, tenant: TenantLedger, db: LedgerRunner
) -> Admission:
    """Ask the host's check about ``dispatch`` and record its answer. A check that fails or
    answers something else counts as ``unknown``: nothing is retried on a guess."""
    try:
        verdict = Admission(await check(dispatch))
    except Exception:
        log.exception("admission check for %s failed; its outcome stays unknown", dispatch.ref)
        verdict = Admission.UNKNOWN
    await db(tenant.calls.record_admission, dispatch.ref, verdict, "hook")
    return verdict


def operation_meta(meta_key: str | None, operation_id: str) -> dict[str, str] | None:
    """``params._meta`` carrying the operation id under the server's duplicate-prevention key
    (``None``, sending no ``_meta``, for a server that did not opt in)."""
    return None if meta_key is None else {meta_key: operation_id}
