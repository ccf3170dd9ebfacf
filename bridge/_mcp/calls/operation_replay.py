"""A call made again with an operation id already recorded: report what the first one
recorded, and send nothing.

A handle is watched again if nobody watches it; a call waiting for input (MRTR) reports its
pending requests; an inline result or a rejection comes back marked ``replayed``; an outcome
left unknown goes to the unknown-outcome retries, which may send the call once more only as
the admission verdict allows (:mod:`bridge._mcp.calls.unknown_outcome_retries`).
"""

from __future__ import annotations

from typing import Any

from bridge._ledger.reads.views import CallView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import TenantLedger
from bridge._lifecycle import CallState
from bridge._mcp.calls.unknown_outcome_retries import UnknownOutcomeRetries
from bridge._mcp.inputs.call_rounds import CallRounds
from bridge._mcp.polling.handle_resumption import HandleResumption
from bridge._outcomes import CallOutcome, InlineResult, RejectedCall, TaskHandle


class CallReplays:
    def __init__(
        self,
        db: LedgerRunner,
        resumption: HandleResumption,
        rounds: CallRounds,
        retries: UnknownOutcomeRetries,
    ) -> None:
        self._db = db
        self._resumption = resumption
        self._rounds = rounds
        self._retries = retries

    async def replay(
        self,
        tenant: TenantLedger,
        previous: CallView,
        run_ref: str,
        tool: str,
        arguments: dict[str, Any],
    ) -> CallOutcome:
        """Same operation id again: report what was recorded, send nothing."""
        # begin_dispatch refuses the id if it was used for another call (OperationReused).
        await self._db(
            tenant.calls.begin_dispatch,
            run_ref,
            server_endpoint=previous.server_endpoint,
            server_name=previous.server_name,
            tool_name=tool,
            arguments=arguments,
            operation_id=previous.operation_id,
        )
        state = previous.state
        if state in (CallState.PENDING, CallState.SENT):
            reason = "an earlier attempt with this operation id never recorded its outcome"
            previous = await self._db(tenant.calls.mark_dispatch_unknown, previous.ref, reason)
            state = previous.state
        if state is CallState.TASK:
            assert previous.task_ref is not None
            task = await self._db(tenant.reads.get_task, previous.task_ref)
            await self._resumption.watch_again(tenant.principal, task)
            return TaskHandle(previous.ref, task, replayed=True)
        if state is CallState.INPUT_REQUIRED:
            return await self._rounds.pending_of(tenant.principal, previous.ref)
        if state is CallState.RESULT:
            if isinstance(previous.result, dict) and set(previous.result) == {"error"}:
                return RejectedCall(previous.ref, previous.result["error"], replayed=True)
            return InlineResult(
                previous.ref, previous.result, truncated=previous.result_truncated, replayed=True
            )
        return await self._retries.replayed_unknown(tenant, previous, arguments)
