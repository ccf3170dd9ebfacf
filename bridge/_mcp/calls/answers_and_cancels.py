"""Requests about an existing task on behalf of the host: answers (``tasks/update``) and
cancels (``tasks/cancel``), each recorded before it is sent.

A JSON-RPC error to either is a refusal, not a verdict on the task: ``-32602`` may mean a badly
shaped request as well as an unknown task, so only a confirming ``tasks/get`` that answers
``-32602`` too marks the task lost. A refused answer is dropped (``task.input_answer_refused``),
never resent, and the request is answerable again; the host learns why from
:class:`~bridge.errors.AnswerRefused`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bridge._errors import AnswerRefused, TaskRequestFailed
from bridge._ledger.reads.views import TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import LostReason
from bridge._mcp.failures import Failure, FailureKind, classify
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._mcp.servers import ServerConnection, ServerPool
from bridge._mcp.task_requests import deliver_answers, fetch_task, send_cancel
from bridge._mcp.wire.shapes import INTERNAL_ERROR, INVALID_PARAMS
from bridge._outcomes import AnswerDelivery, AnswerReceipt
from bridge._redaction import scrub_task_id


class TaskUpdates:
    """``tasks/update`` and ``tasks/cancel`` for the requester's handles."""

    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        pool: ServerPool,
        scheduler: PollScheduler,
        on_closed: Callable[[str, str], None],
    ) -> None:
        self.ledger = ledger
        self.db = db
        self.pool = pool
        self.scheduler = scheduler
        self._on_closed = on_closed

    async def answer_input(
        self, principal: str, task_ref: str, input_ref: str, response: Any
    ) -> AnswerReceipt:
        """Answer one input request of a task. Recorded first, then sent with ``tasks/update``.

        ``input_ref`` names the request as the ``task.input_required`` event did (``in_…``).
        The receipt says whether the server acknowledged it now (``DELIVERED``), whether the
        recorded answer waits to be redelivered before the task's next poll (``QUEUED``;
        servers ignore keys already answered), or whether the server no longer knows the task
        (``TASK_LOST``: a ``-32602`` confirmed by ``tasks/get``). Raises ``AnswerRefused`` when
        the server refused the update (not delivered, never resent, an anomaly on the run, the
        request answerable again), and
        ``UnknownInputKey`` / ``InputAlreadyAnswered`` for a bad or repeated key (nothing
        recorded).
        """
        tenant = self.ledger.for_principal(principal)
        request = await self.db(tenant.inputs.record_input_answer, task_ref, input_ref, response)
        task = await self.db(tenant.reads.get_task, task_ref)
        carrier = self.scheduler.answer_carrier
        if carrier is not None and carrier.carries(task):  # 2025-11-25: no tasks/update
            carrier.answers_recorded(task_ref)  # the server's waiting request takes it
            return AnswerReceipt(task_ref, request.ref, AnswerDelivery.QUEUED)
        connection = self._connection_for(task.server_endpoint)
        try:
            if connection is None:
                raise TaskRequestFailed(task_ref, "no enabled server has this endpoint")
            await deliver_answers(connection, task, {request.key: response})
        except Exception as exc:
            failure = classify(exc)
            if failure is not None and _refused(failure):
                assert connection is not None
                if await self._lost_if_confirmed(principal, connection, task, "tasks/update"):
                    return AnswerReceipt(task_ref, request.ref, AnswerDelivery.TASK_LOST)
                reason = await self._record_refusal(tenant, task, "tasks/update", failure)
                # dropped and reopened: recovery never resends it, a corrected answer is taken
                await self.db(tenant.inputs.record_answer_refused, task_ref, request.ref, reason)
                raise AnswerRefused(task_ref, request.ref, reason, failure.code) from None
            if failure is None and not isinstance(exc, TaskRequestFailed):
                raise
            self.scheduler.mark_undelivered_answers(task_ref)
            return AnswerReceipt(task_ref, request.ref, AnswerDelivery.QUEUED)
        await self.db(tenant.inputs.mark_answer_delivered, task_ref, request.ref)
        self.scheduler.poll_soon(task_ref)
        return AnswerReceipt(task_ref, request.ref, AnswerDelivery.DELIVERED)

    async def cancel_task(self, principal: str, task_ref: str, requested_by: str = "host") -> bool:
        """Ask the server to cancel (recorded first as intent). Returns whether it acknowledged.

        An acknowledgement is not a stop: the task's status changes only when a poll sees it.
        It is recorded, and a cancel the server acknowledged already (this process or one
        that died since) is not sent again: the answer is ``True`` at once.
        """
        tenant = self.ledger.for_principal(principal)
        if not await self.db(tenant.tasks.record_cancel_requested, task_ref, requested_by):
            return False  # already terminal
        task = await self.db(tenant.reads.get_task, task_ref)
        if task.cancel_acknowledged_at_ms is not None:
            return True
        connection = self._connection_for(task.server_endpoint)
        if connection is None:
            return False
        try:
            await send_cancel(connection, task)
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            if _refused(failure):
                if not await self._lost_if_confirmed(principal, connection, task, "tasks/cancel"):
                    await self._record_refusal(tenant, task, "tasks/cancel", failure)
                return False
            self.scheduler.mark_cancel_pending(task_ref)  # resent before the next poll
            return False
        await self.db(tenant.tasks.record_cancel_acknowledged, task_ref)
        self.scheduler.poll_soon(task_ref)
        return True

    async def _lost_if_confirmed(
        self, principal: str, connection: ServerConnection, task: TaskView, method: str
    ) -> bool:
        """A ``-32602`` to ``tasks/update|cancel`` may mean a badly shaped request as well as
        an unknown task: only a ``tasks/get`` answering ``-32602`` too makes the task lost."""
        try:
            await fetch_task(connection, task)
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            if failure.kind is FailureKind.RPC_ERROR and failure.code == INVALID_PARAMS:
                await self._lose_not_found(principal, task.ref, f"{method} and tasks/get")
                return True
        self.scheduler.poll_soon(task.ref)  # alive (or cannot tell): keep watching it
        return False

    async def _record_refusal(
        self, tenant: TenantLedger, task: TaskView, method: str, failure: Failure
    ) -> str:
        """Anomaly on the task's run (raw id scrubbed by the ledger); returns the reason."""
        reason = scrub_task_id(f"{failure.code}: {failure.detail[:200]}", task.task_id, task.ref)
        await self.db(
            tenant.runs.record_anomaly,
            task.run_ref,
            f"{method.removeprefix('tasks/')}_refused",
            f"{method} answered {reason}",
            task_ref=task.ref,
        )
        return reason

    async def _lose_not_found(self, principal: str, task_ref: str, method: str) -> None:
        tenant = self.ledger.for_principal(principal)
        detail = f"{method} answered -32602 (unknown task)"  # never the server's own text
        await self.db(tenant.tasks.mark_task_lost, task_ref, LostReason.NOT_FOUND, detail)
        self.scheduler.forget(task_ref)
        self._on_closed(principal, task_ref)

    def _connection_for(self, endpoint: str) -> ServerConnection | None:
        config = self.pool.config_for_endpoint(endpoint)
        return self.pool.connection(config.name) if config is not None else None


def _refused(failure: Failure) -> bool:
    """A definite JSON-RPC refusal (-32603 is ambiguous: the request may have been applied)."""
    return failure.kind is FailureKind.RPC_ERROR and failure.code != INTERNAL_ERROR
