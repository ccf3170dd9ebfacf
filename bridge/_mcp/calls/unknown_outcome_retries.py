"""What happens after an unknown outcome: retry, ask the host's admission check, or report.

A tool safe to repeat (read-only or idempotent by its annotations, or in the server's
``retry_safe_tools``) is retried when the policy says ``retry_if_safe``. Any other tool is
consequential: it is retried only after the host's admission check
(:mod:`bridge._mcp.calls.admission`) said the server never took it, and every retry carries the
original operation id as its duplicate-prevention key. Each retry is a dispatch of its own
(``<operation id>~retry<n>``), so the original stays ``unknown`` on record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio

from bridge._ledger.reads.views import CallView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import Admission
from bridge._mcp.calls.admission import AdmissionChecks, ask_admission
from bridge._mcp.servers import ServerConnection
from bridge._outcomes import CallOutcome, UnknownOutcome
from bridge._policies import UnknownOutcomePolicy

# The requester's call_tool (a retry is an ordinary bridged call, with keyword arguments).
CallTool = Callable[..., Awaitable[CallOutcome]]


class UnknownOutcomeRetries:
    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        call_tool: CallTool,
        checks: AdmissionChecks,
        max_retries: int,
    ) -> None:
        self._ledger = ledger
        self._db = db
        self._call_tool = call_tool
        self.checks = checks
        self.max_retries = max_retries

    async def after_unknown(
        self,
        connection: ServerConnection,
        intent: CallView,
        arguments: dict[str, Any],
        outcome: UnknownOutcome,
        policy: UnknownOutcomePolicy,
    ) -> CallOutcome:
        """The outcome of ``intent`` is unknown: decide, retrying as allowed."""
        tool = intent.tool_name
        if not await safe_to_repeat(connection, tool):
            check = self.checks.for_tool(connection.config.name, tool)
            if check is None:
                return outcome
            tenant = self._ledger.for_principal(intent.principal)
            admission = await ask_admission(check, intent, tenant, self._db)
            outcome = replace(outcome, admission=admission)
            if admission is not Admission.NOT_ADMITTED:
                return outcome
        if policy is not UnknownOutcomePolicy.RETRY_IF_SAFE:
            return outcome
        retries: list[CallOutcome] = []
        last: CallOutcome = outcome
        for attempt in range(1, self.max_retries + 1):
            if isinstance(last, UnknownOutcome) and last.retry_after_ms:
                await anyio.sleep(last.retry_after_ms / 1000)  # as the server asked (capped)
            last = await self._retry(intent, arguments, attempt, connection.declare_tasks)
            retries.append(last)
            if not isinstance(last, UnknownOutcome):
                break
        return replace(outcome, retries=tuple(retries))

    async def replayed_unknown(
        self, tenant: TenantLedger, previous: CallView, arguments: dict[str, Any]
    ) -> UnknownOutcome:
        """The same operation id again after an unknown outcome. Declared ``not_admitted``
        (by the check or the host): sent again, once, under the same duplicate-prevention key
        (a later replay finds that retry on record and sends nothing). Otherwise: reported."""
        admission = await self._db(tenant.calls.admission_of, previous.ref)
        unknown = UnknownOutcome(
            previous.ref, previous.unknown_reason or "unknown", replayed=True, admission=admission
        )
        if admission is not Admission.NOT_ADMITTED or previous.server_name is None:
            return unknown
        return replace(unknown, retries=(await self._retry(previous, arguments, 1, True),))

    async def _retry(
        self, intent: CallView, arguments: dict[str, Any], attempt: int, declare_tasks: bool
    ) -> CallOutcome:
        assert intent.server_name is not None
        return await self._call_tool(
            intent.principal,
            intent.run_ref,
            intent.server_name,
            intent.tool_name,
            arguments,
            operation_id=f"{intent.operation_id}~retry{attempt}",
            declare_tasks=declare_tasks,
            unknown_outcomes=UnknownOutcomePolicy.REPORT,
            duplicate_key=intent.operation_id,
        )


async def safe_to_repeat(connection: ServerConnection, tool: str) -> bool:
    """Read-only or idempotent by the tool's annotations, or listed in ``retry_safe_tools``."""
    if tool in connection.config.retry_safe_tools:
        return True
    try:
        annotations = await connection.tool_annotations(tool)
    except Exception:
        return False  # cannot tell: treat as consequential
    return bool(annotations and (annotations.read_only_hint or annotations.idempotent_hint))
