"""Recording a ``tools/call`` reply that is not a plain result, for the requester's send path.

* A created task (``CreateTaskResult``): its ``taskId`` is checked
(:mod:`bridge._mcp.wire.task_ids`),
  the handle committed, and only then watched and handed out; a task created terminal with its
  outcome included is closed at once, without a poll.
* A reply that failed validation, or a result whose ``resultType`` no spec defines: the
  dispatch becomes ``unknown`` with an anomaly on its run, and
  :class:`~bridge.errors.InvalidTaskResponse` is raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import pydantic

from bridge._errors import DuplicateTaskHandle, InvalidTaskResponse, MalformedTaskHandle
from bridge._ledger.coordination.replica import ReplicaLeases
from bridge._ledger.reads.views import CallView, TaskObservation
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import TenantLedger
from bridge._lifecycle import TaskStatus
from bridge._mcp.failures import Failure
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._mcp.servers import ServerConnection
from bridge._mcp.wire.generations import TaskGeneration, stored_generation
from bridge._mcp.wire.shapes import CreateTaskResult
from bridge._mcp.wire.task_ids import task_id_problem
from bridge._outcomes import TaskHandle

# The requester's emit_task_span: a task that just closed, by principal and task_ref.
TaskClosed = Callable[[str, str], None]


class CallReplies:
    """Built by the requester; ``scheduler`` and ``replica`` are read when a reply arrives
    (the scheduler exists only inside ``async with``, the replica once attached)."""

    def __init__(
        self,
        db: LedgerRunner,
        scheduler: Callable[[], PollScheduler],
        replica: Callable[[], ReplicaLeases | None],
        clock: Callable[[], int],
        on_closed: TaskClosed,
    ) -> None:
        self._db = db
        self._scheduler = scheduler
        self._replica = replica
        self._clock = clock
        self._on_closed = on_closed

    async def record_handle(
        self,
        tenant: TenantLedger,
        connection: ServerConnection,
        intent: CallView,
        created: CreateTaskResult,
        generation: TaskGeneration = TaskGeneration.EXTENSION,
    ) -> TaskHandle:
        problem = task_id_problem(created.task_id)
        if problem is not None:
            detail = f"tools/call: {problem}"
            await self._db(tenant.calls.mark_dispatch_unknown, intent.ref, detail)
            await self._db(
                tenant.runs.record_anomaly,
                intent.run_ref,
                "malformed_task_handle",
                detail,
                op_ref=intent.ref,
            )
            raise MalformedTaskHandle(intent.ref, detail)
        now = self._clock()
        ttl_deadline = None if created.ttl_ms is None else now + created.ttl_ms
        due = self._scheduler().timing.next_due_ms(now, created.poll_interval_ms, ttl_deadline)
        # Leased mode: held by this replica incarnation from its first commit.
        replica = self._replica()
        lease = replica.membership if replica is not None else None
        handle: dict[str, Any] = {
            "task_id": created.task_id,
            "status": TaskStatus(created.status),
            "status_message": created.status_message,
            "server_created_at": created.created_at,
            "server_updated_at": created.last_updated_at,
            "ttl_ms": created.ttl_ms,
            "poll_interval_ms": created.poll_interval_ms,
            "next_poll_due_ms": due,
            "server_version": connection.info.version,
            "credential_ref": connection.config.credential_ref,
            "lease": lease,
            "task_generation": stored_generation(generation),
        }
        try:
            staged = tenant.calls.stage_task_created(intent.ref, **handle)
            task = await self._db.commit(tenant.group_commit, staged)
        except DuplicateTaskHandle as exc:
            # The ledger refused it atomically (its anomaly is on this dispatch's run); the
            # dispatch itself still says "sent": settle it as unknown, with its event.
            detail = "tools/call: a taskId the ledger already holds for another call"
            await self._db(tenant.calls.mark_dispatch_unknown, intent.ref, detail)
            raise MalformedTaskHandle(intent.ref, detail) from exc
        inline = _inline_outcome(created)
        if inline is not None:
            # Created terminal, outcome included: stored like a polled one (bounded, scrubbed,
            # task.terminal), and the handle closes without a poll. A terminal create without
            # its outcome stays due: tasks/get fetches it, and a -32602 there loses the handle.
            closed = await self._db(tenant.tasks.observe_task, task.ref, inline, lease=lease)
            task = closed.task
            if not task.is_open:
                self._on_closed(tenant.principal, task.ref)
                return TaskHandle(intent.ref, task)
        # Committed: only now is the handle watched and handed out.
        self._scheduler().watch(tenant.principal, task, due_ms=due, lease=lease)
        return TaskHandle(intent.ref, task)

    async def invalid(
        self,
        tenant: TenantLedger,
        intent: CallView,
        connection: ServerConnection,
        exc: BaseException,
        failure: Failure,
    ) -> None:
        """A reply that failed validation: recorded as unknown with its anomaly, then raised."""
        if not connection.declare_tasks and _looks_like_task(exc):
            kind = "task_on_undeclared_request"
            detail = "server returned a task to a tools/call that did not declare tasks support"
        else:
            kind, detail = "malformed_reply", f"tools/call: {failure.detail}"
        await self._refuse(tenant, intent, kind, detail)

    async def unknown_result_type(
        self, tenant: TenantLedger, intent: CallView, result_type: str
    ) -> NoReturn:
        """A ``CallToolResult`` whose ``resultType`` is none the bridge knows: recorded as
        unknown with its anomaly (the server may have acted), then raised; never a result."""
        detail = f"tools/call: unknown resultType {result_type[:40]!r}"
        await self._refuse(tenant, intent, "malformed_reply", detail)

    async def _refuse(
        self, tenant: TenantLedger, intent: CallView, kind: str, detail: str
    ) -> NoReturn:
        await self._db(tenant.calls.mark_dispatch_unknown, intent.ref, detail)
        await self._db(tenant.runs.record_anomaly, intent.run_ref, kind, detail, op_ref=intent.ref)
        raise InvalidTaskResponse(intent.ref, detail) from None


def _inline_outcome(created: CreateTaskResult) -> TaskObservation | None:
    """The terminal observation a ``CreateTaskResult`` carries whole, if it does: ``completed``
    with its ``result``, ``failed`` with its ``error``, or ``cancelled``."""
    status = TaskStatus(created.status)
    carried = {
        TaskStatus.COMPLETED: created.result is not None,
        TaskStatus.FAILED: created.error is not None,
        TaskStatus.CANCELLED: True,
    }
    if not carried.get(status, False):
        return None
    return TaskObservation(
        status=status,
        status_message=created.status_message,
        result=created.result,
        error=created.error,
    )


def _looks_like_task(exc: BaseException) -> bool:
    """Did a reply that failed validation carry ``resultType: "task"``?"""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if not isinstance(exc, pydantic.ValidationError):
        return False
    for error in exc.errors():
        candidate = error.get("input")
        if isinstance(candidate, dict) and candidate.get("resultType") == "task":
            return True
    return "'task'" in str(exc)
