"""The durable Tasks requester: bridged ``tools/call`` with write-ahead, input, cancel, resume.

Write-ahead order of one call (each step committed before the next happens):

1. the dispatch intent, with tool, argument digest and operation id, committed as ``sent``
   immediately before the request is handed to the transport (one commit, not two: on the
   critical path every commit counts);
2. the handle (``task``) or the result (``result``) before anything is returned; or, when the
   request may have left but nothing definite came back, ``unknown`` plus an event.

A consequential call whose outcome is unknown is reported, never repeated blindly: a tool that
is read-only or idempotent (by its annotations or the server's ``retry_safe_tools``) may be
retried when the caller's policy says so; any other only after the host's admission check said
the server never took it (:mod:`bridge.mcp.admission`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from types import TracebackType
from typing import Any

import anyio
import mcp_types
import pydantic
from anyio.abc import TaskGroup

from bridge import _telemetry as telemetry
from bridge.aio import LedgerRunner
from bridge.errors import (
    DuplicateTaskHandle,
    InvalidTaskResponse,
    InvalidTransition,
    MalformedTaskHandle,
)
from bridge.input_handlers import InputHandlers
from bridge.ledger.availability import WriteLockBusy
from bridge.ledger.fencing import Membership
from bridge.ledger.leases import TenantLeases
from bridge.ledger.rounds import RetryLeg
from bridge.ledger.store import Ledger, TenantLedger
from bridge.ledger.views import DispatchView, TaskObservation, TaskView
from bridge.lifecycle import Admission, DispatchState, TaskStatus
from bridge.mcp import legacy_wire
from bridge.mcp.admission import AdmissionChecks, operation_meta
from bridge.mcp.call_inputs import CallInputs
from bridge.mcp.failures import Failure, FailureKind, classify
from bridge.mcp.generations import TaskGeneration, negotiated_generation, stored_generation
from bridge.mcp.handles import task_id_problem
from bridge.mcp.legacy_inputs import install_legacy_inputs
from bridge.mcp.mrtr import CallRounds, is_call_ref, wire_responses
from bridge.mcp.outcomes import (
    AnswerReceipt,
    CallOutcome,
    InlineResult,
    RejectedCall,
    TaskHandle,
    UnknownOutcome,
)
from bridge.mcp.push import PushUpdates
from bridge.mcp.retries import UnknownOutcomeRetries
from bridge.mcp.scheduler import (
    PollScheduler,
    SchedulerConfig,
)
from bridge.mcp.servers import (
    CredentialResolver,
    McpServerConfig,
    ServerConnection,
    ServerPool,
    no_credentials,
)
from bridge.mcp.task_inputs import TaskInputs
from bridge.mcp.task_updates import TaskUpdates
from bridge.mcp.wire import (
    CreateTaskResult,
)
from bridge.policies import InputPolicy, UnknownOutcomePolicy
from bridge.redaction import install_log_redaction
from bridge.replica import ReplicaLeases


@dataclass(frozen=True, slots=True)
class ResumeReport:
    tasks_watched: int = 0
    dispatches_marked_unknown: int = 0
    answers_to_redeliver: int = 0
    cancels_to_resend: int = 0

    def __add__(self, other: ResumeReport) -> ResumeReport:
        return ResumeReport(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: ResumeReport) -> ResumeReport:
        return ResumeReport(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


class TaskRequester:
    """Bridged MCP tool calls for any number of outer runs, with one poll scheduler."""

    def __init__(
        self,
        ledger: Ledger,
        servers: Sequence[McpServerConfig],
        *,
        credentials: CredentialResolver = no_credentials,
        scheduler: SchedulerConfig | None = None,
        unknown_outcomes: UnknownOutcomePolicy = UnknownOutcomePolicy.REPORT,
        max_unknown_retries: int = 1,
        clock: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        db: LedgerRunner | None = None,
        input_handlers: InputHandlers | None = None,
        input_policy: InputPolicy | None = None,
        admission_checks: AdmissionChecks | None = None,
    ) -> None:
        self.ledger = ledger
        # Default: the host answers form elicitations itself; nothing else is declared.
        self.input_handlers = input_handlers or InputHandlers()
        self.input_policy = input_policy or InputPolicy()
        self._servers = list(servers)
        self._credentials = credentials
        self._scheduler_config = scheduler
        self.unknown_outcomes = unknown_outcomes
        self._clock = clock or ledger.clock  # one clock for due times, TTLs and the ledger
        self._rng = rng
        # The bridge passes the one runner it built; a requester used alone builds its own.
        self.db = db or LedgerRunner(inline=ledger.dialect.runs_calls_inline)
        self.retries = UnknownOutcomeRetries(
            ledger,
            self.db,
            self.call_tool,
            admission_checks or AdmissionChecks(),
            max_unknown_retries,
        )
        self._tg: TaskGroup | None = None
        self._pool: ServerPool | None = None
        self._scheduler: PollScheduler | None = None
        self._push: PushUpdates | None = None
        self._updates: TaskUpdates | None = None
        self.rounds = CallRounds(ledger, self.db, lambda: self.pool, self._send)  # MRTR
        self.replica: ReplicaLeases | None = None
        # Running totals of the leased handles this replica took over (claims, adoptions).
        self.handover = ResumeReport()

    # -- lifetime ----------------------------------------------------------------------------
    async def __aenter__(self) -> TaskRequester:
        install_log_redaction()  # the SDK logs whole messages, taskId included, at DEBUG
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._pool = ServerPool(
            self._servers,
            self._tg,
            self._credentials,
            declared_inputs=self.input_handlers.capabilities_for,
        )
        self._scheduler = PollScheduler(
            self.ledger,
            self._pool,
            self.db,
            self._scheduler_config,
            clock=self._clock,
            rng=self._rng,
        )
        self._scheduler.on_closed = self.emit_task_span
        self._push = PushUpdates(self._scheduler, self._pool, self._tg)
        self._updates = TaskUpdates(
            self.ledger, self.db, self._pool, self._scheduler, self.emit_task_span
        )
        self._scheduler.inputs = TaskInputs(
            self.ledger, self.db, self._pool, self._scheduler, self._tg, self.input_handlers
        ).with_policy(self.input_policy, self.answer_input, self.cancel_task, self._clock)
        self.rounds.on_inputs = CallInputs(  # MRTR inputs: the same handlers, on the call
            self.ledger, self.db, self.rounds, self._tg, self.input_handlers, self.input_policy
        ).recorded
        install_legacy_inputs(self.ledger, self.db, self._pool, self._scheduler, self._tg)
        await self._tg.start(self._scheduler.run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None and self._pool is not None
        self._tg.cancel_scope.cancel()
        try:
            with anyio.CancelScope(shield=True):
                await self._pool.aclose()
        finally:
            await self._tg.__aexit__(exc_type, exc, tb)
        return None

    @property
    def scheduler(self) -> PollScheduler:
        if self._scheduler is None:
            raise RuntimeError("use the requester inside 'async with'")
        return self._scheduler

    @property
    def push(self) -> PushUpdates:
        """The listen streams for pushed task states (``bridge.mcp.push``)."""
        if self._push is None:
            raise RuntimeError("use the requester inside 'async with'")
        return self._push

    @property
    def updates(self) -> TaskUpdates:
        if self._updates is None:
            raise RuntimeError("use the requester inside 'async with'")
        return self._updates

    @property
    def pool(self) -> ServerPool:
        if self._pool is None:
            raise RuntimeError("use the requester inside 'async with'")
        return self._pool

    # -- calls -------------------------------------------------------------------------------
    async def call_tool(
        self,
        principal: str,
        run_ref: str,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        operation_id: str | None = None,
        declare_tasks: bool = True,
        unknown_outcomes: UnknownOutcomePolicy | None = None,
        duplicate_key: str | None = None,
    ) -> CallOutcome:
        """Call ``tool`` on ``server`` inside the outer run ``run_ref``, write-ahead.

        ``operation_id`` makes the call idempotent across retries and restarts: a second call
        with the same id returns what the first one recorded and sends nothing. Raises
        :class:`~bridge.errors.ServerConnectFailed` (nothing sent) or
        :class:`~bridge.errors.InvalidTaskResponse` (recorded as unknown, with an anomaly).
        ``duplicate_key``: what a server with an ``operation_id_meta_key`` is sent (default: the
        operation id; a retry sends the original call's).
        """
        tenant = self.ledger.for_principal(principal)
        arguments = arguments or {}
        if operation_id is not None:
            previous = await self.db(tenant.find_dispatch, operation_id)
            if previous is not None:
                return await self._replay(tenant, previous, run_ref, tool, arguments)
        connection = self.pool.connection(server, declare_tasks=declare_tasks)
        session = await connection.session()  # unreachable -> raises here, before recording
        if connection.declare_tasks and negotiated_generation(session) is _LEGACY_TASKS:
            await legacy_wire.learn_task_support(connection, tool)  # tools/list, before too
        config = connection.config
        with telemetry.tool_call_span(config.url, tool) as span:
            ids = telemetry.span_ids(span)
            intent_fields: dict[str, Any] = {
                "server_endpoint": config.endpoint,
                "server_name": config.name,
                "tool_name": tool,
                "arguments": arguments,
                "operation_id": operation_id,
                "sent": True,  # committed as released: the request leaves right after this
                "trace_id": ids[0] if ids else None,
                "span_id": ids[1] if ids else None,
                "dispatcher": self.replica.membership if self.replica is not None else None,
            }
            if self.db.inline:  # an embedded ledger commits faster than a hop through the runner
                try:
                    intent = tenant.begin_dispatch(run_ref, **intent_fields)
                except WriteLockBusy:  # nothing written, nothing sent: wait off the loop
                    intent = await self.db.when_lock_free(
                        tenant.begin_dispatch, run_ref, **intent_fields
                    )
            else:
                intent = await self.db(tenant.begin_dispatch, run_ref, **intent_fields)
            outcome = await self._send(
                tenant, connection, intent, tool, arguments, duplicate_key=duplicate_key
            )
            if type(outcome) is InlineResult:
                return outcome  # the usual answer, nothing more to mark or retry
            if isinstance(outcome, RejectedCall):
                telemetry.mark_rpc_error(span, outcome.code, "rpc_error")
            elif isinstance(outcome, UnknownOutcome):
                telemetry.mark_rpc_error(span, None, "unknown_outcome")
        if isinstance(outcome, UnknownOutcome):
            policy = unknown_outcomes or self.unknown_outcomes
            outcome = await self.retries.after_unknown(
                connection, intent, arguments, outcome, policy
            )
        return outcome

    async def _send(
        self,
        tenant: TenantLedger,
        connection: ServerConnection,
        intent: DispatchView,
        tool: str,
        arguments: dict[str, Any],
        leg: RetryLeg | None = None,
        *,
        duplicate_key: str | None = None,
    ) -> CallOutcome:
        """Send one leg of the call (``leg``: an MRTR retry with the answers) and record it."""
        config = connection.config
        generation = TaskGeneration.EXTENSION
        try:
            session = await connection.session()
            meta = operation_meta(
                config.operation_id_meta_key, duplicate_key or intent.operation_id
            )
            if connection.declare_tasks:
                generation = negotiated_generation(session)
            if generation is TaskGeneration.EXPERIMENTAL_2025_11_25:
                reply: Any = await legacy_wire.call_tool(
                    connection, session, tool, arguments, meta=meta
                )
            else:
                reply = await session.call_tool(
                    tool,
                    arguments,
                    read_timeout_seconds=config.request_timeout_s,
                    allow_claimed=connection.declare_tasks,
                    allow_input_required=True,
                    input_responses=wire_responses(leg) if leg is not None else None,
                    request_state=leg.request_state if leg is not None else None,
                    meta=meta,  # type: ignore[arg-type]
                )
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                await self.db(tenant.mark_dispatch_unknown, intent.ref, f"bridge error: {exc!r}")
                raise
            if failure.kind is FailureKind.MALFORMED:
                await self._invalid_reply(tenant, intent, connection, exc, failure)
            if failure.leaves_call_outcome_unknown:
                await self.db(tenant.mark_dispatch_unknown, intent.ref, failure.detail)
                return UnknownOutcome(
                    intent.ref, failure.detail, retry_after_ms=failure.retry_after_ms
                )
            settled = await self.db(tenant.record_call_error, intent.ref, failure.as_error_object())
            return RejectedCall(intent.ref, settled.result["error"])
        # (a CallToolResult is told apart first: isinstance on a pydantic class is not free)
        if type(reply) is not mcp_types.CallToolResult:
            if isinstance(reply, CreateTaskResult):
                return await self._record_handle(tenant, connection, intent, reply, generation)
            if isinstance(reply, mcp_types.InputRequiredResult):
                return await self.rounds.received(tenant, connection, intent, reply, arguments)
        result = _dump(reply)
        if self.db.inline:
            try:
                settled = tenant.record_immediate_result(intent.ref, result, intent=intent)
            except WriteLockBusy:
                settled = await self.db.when_lock_free(
                    tenant.record_immediate_result, intent.ref, result, intent=intent
                )
        else:
            settled = await self.db(
                tenant.record_immediate_result, intent.ref, result, intent=intent
            )
        return InlineResult(intent.ref, settled.result, truncated=settled.result_truncated)

    async def _record_handle(
        self,
        tenant: TenantLedger,
        connection: ServerConnection,
        intent: DispatchView,
        created: CreateTaskResult,
        generation: TaskGeneration = TaskGeneration.EXTENSION,
    ) -> TaskHandle:
        problem = task_id_problem(created.task_id)
        if problem is not None:
            detail = f"tools/call: {problem}"
            await self.db(tenant.mark_dispatch_unknown, intent.ref, detail)
            await self.db(
                tenant.record_anomaly,
                intent.run_ref,
                "malformed_task_handle",
                detail,
                op_ref=intent.ref,
            )
            raise MalformedTaskHandle(intent.ref, detail)
        now = self._clock()
        ttl_deadline = None if created.ttl_ms is None else now + created.ttl_ms
        due = self.scheduler.next_due_ms(now, created.poll_interval_ms, ttl_deadline)
        # Leased mode: held by this replica incarnation from its first commit.
        lease = self.replica.membership if self.replica is not None else None
        try:
            task = await self.db(
                tenant.record_task_created,
                intent.ref,
                task_id=created.task_id,
                status=TaskStatus(created.status),
                status_message=created.status_message,
                server_created_at=created.created_at,
                server_updated_at=created.last_updated_at,
                ttl_ms=created.ttl_ms,
                poll_interval_ms=created.poll_interval_ms,
                next_poll_due_ms=due,
                server_version=connection.info.version,
                credential_ref=connection.config.credential_ref,
                lease=lease,
                task_generation=stored_generation(generation),
            )
        except DuplicateTaskHandle as exc:
            # The ledger refused it atomically (its anomaly is on this dispatch's run); the
            # dispatch itself still says "sent": settle it as unknown, with its event.
            detail = "tools/call: a taskId the ledger already holds for another call"
            await self.db(tenant.mark_dispatch_unknown, intent.ref, detail)
            raise MalformedTaskHandle(intent.ref, detail) from exc
        inline = _inline_outcome(created)
        if inline is not None:
            # Created terminal, outcome included: stored like a polled one (bounded, scrubbed,
            # task.terminal), and the handle closes without a poll. A terminal create without
            # its outcome stays due: tasks/get fetches it, and a -32602 there loses the handle.
            closed = await self.db(tenant.observe_task, task.ref, inline, lease=lease)
            task = closed.task
            if not task.is_open:
                self.emit_task_span(tenant.principal, task.ref)
                return TaskHandle(intent.ref, task)
        # Committed: only now is the handle watched and handed out.
        self.scheduler.watch(tenant.principal, task, due_ms=due, lease=lease)
        return TaskHandle(intent.ref, task)

    async def _invalid_reply(
        self,
        tenant: TenantLedger,
        intent: DispatchView,
        connection: ServerConnection,
        exc: BaseException,
        failure: Failure,
    ) -> None:
        if not connection.declare_tasks and _looks_like_task(exc):
            kind = "task_on_undeclared_request"
            detail = "server returned a task to a tools/call that did not declare tasks support"
        else:
            kind, detail = "malformed_reply", f"tools/call: {failure.detail}"
        await self.db(tenant.mark_dispatch_unknown, intent.ref, detail)
        await self.db(tenant.record_anomaly, intent.run_ref, kind, detail, op_ref=intent.ref)
        raise InvalidTaskResponse(intent.ref, detail) from None

    async def _replay(
        self,
        tenant: TenantLedger,
        previous: DispatchView,
        run_ref: str,
        tool: str,
        arguments: dict[str, Any],
    ) -> CallOutcome:
        """Same operation id again: report what was recorded, send nothing."""
        # begin_dispatch refuses the id if it was used for another call (OperationReused).
        await self.db(
            tenant.begin_dispatch,
            run_ref,
            server_endpoint=previous.server_endpoint,
            server_name=previous.server_name,
            tool_name=tool,
            arguments=arguments,
            operation_id=previous.operation_id,
        )
        state = previous.state
        if state in (DispatchState.PENDING, DispatchState.SENT):
            reason = "an earlier attempt with this operation id never recorded its outcome"
            previous = await self.db(tenant.mark_dispatch_unknown, previous.ref, reason)
            state = previous.state
        if state is DispatchState.TASK:
            assert previous.task_ref is not None
            task = await self.db(tenant.get_task, previous.task_ref)
            if task.is_open and not self.scheduler.is_watching(task.ref):
                await self._watch_new(tenant.principal, task, None)
            return TaskHandle(previous.ref, task, replayed=True)
        if state is DispatchState.INPUT_REQUIRED:
            return await self.rounds.pending_of(tenant.principal, previous.ref)
        if state is DispatchState.RESULT:
            if isinstance(previous.result, dict) and set(previous.result) == {"error"}:
                return RejectedCall(previous.ref, previous.result["error"], replayed=True)
            return InlineResult(
                previous.ref, previous.result, truncated=previous.result_truncated, replayed=True
            )
        return await self.retries.replayed_unknown(tenant, previous, arguments)

    async def resolve_unknown_outcome(
        self, principal: str, op_ref: str, admission: Admission
    ) -> None:
        """The host's verdict on a call whose outcome is unknown (``call.admission_checked``
        with ``decided_by="host"``). Raises ``InvalidTransition`` unless the dispatch is
        ``unknown`` and not resolved yet. After ``not_admitted``, calling again with the same
        operation id sends the call once more (same duplicate-prevention key)."""
        tenant = self.ledger.for_principal(principal)
        await self.db(tenant.record_admission, op_ref, admission, "host")

    # -- input, cancel, detach -------------------------------------------------------------
    async def answer_input(
        self, principal: str, task_ref: str, input_ref: str, response: Any
    ) -> AnswerReceipt:
        """Answer one input request of a task (see :meth:`TaskUpdates.answer_input`), or of a
        call waiting for input (``task_ref`` is then the call's ``op_ref``; see :mod:`.mrtr`)."""
        if is_call_ref(task_ref):
            return await self.rounds.answer(principal, task_ref, input_ref, response)
        return await self.updates.answer_input(principal, task_ref, input_ref, response)

    async def cancel_task(self, principal: str, task_ref: str, requested_by: str = "host") -> bool:
        """Ask the server to cancel (see :meth:`TaskUpdates.cancel_task`)."""
        return await self.updates.cancel_task(principal, task_ref, requested_by)

    async def detach_task(self, principal: str, task_ref: str, requested_by: str = "host") -> bool:
        """Stop watching a task without cancelling it (recorded, with an event)."""
        tenant = self.ledger.for_principal(principal)
        detached = await self.db(tenant.detach_task, task_ref, requested_by)
        self.scheduler.forget(task_ref)
        return detached

    def emit_task_span(self, principal: str, task_ref: str) -> None:
        """Emit the lifetime span of a task that just closed (when tracing is configured)."""
        if not telemetry.enabled():
            return
        tenant = self.ledger.for_principal(principal)
        task = tenant.get_task(task_ref)
        if task.terminal_at_ms is None and task.lost_reason is None:
            return  # detached, not ended: its lifetime is not over
        dispatch = tenant.get_dispatch(task.op_ref)
        run = tenant.get_run(task.run_ref)
        events = tenant.events(task.run_ref)
        telemetry.emit_task_span(
            task, run, dispatch.trace_id, dispatch.span_id, events, self.ledger.clock()
        )

    # -- restart -----------------------------------------------------------------------------
    async def resume(
        self, principals: Sequence[str], *, settle_in_flight_dispatches: bool = True
    ) -> ResumeReport:
        """Pick up every open handle of these principals after a restart (any process).

        Dispatches left ``pending``/``sent`` by a process that died become ``unknown`` (with an
        event): nobody can tell whether they reached the server. Only settle them when no other
        live process is dispatching for these principals.
        """
        watched = unknown = answers = cancels = 0
        for principal in principals:
            tenant = self.ledger.for_principal(principal)
            if settle_in_flight_dispatches:
                stuck = await self.db(
                    tenant.list_dispatches, states=[DispatchState.PENDING, DispatchState.SENT]
                )
                for dispatch in stuck:
                    await self.db(
                        tenant.mark_dispatch_unknown,
                        dispatch.ref,
                        f"process stopped with the call {dispatch.state.value}; outcome unknown",
                    )
                    unknown += 1
            tasks = await self.db(tenant.list_tasks, open_only=True)
            seeded = await self._watch_all(tenant, tasks, lease=None)
            watched += len(tasks)
            cancels += seeded.cancels_to_resend
            answers += seeded.answers_to_redeliver
        assert self._tg is not None  # MRTR rounds answered whose next leg never left:
        answers += await self.rounds.resume(principals, self._tg)
        return ResumeReport(watched, unknown, answers, cancels)

    async def _watch_all(
        self, tenant: TenantLedger, tasks: Sequence[TaskView], lease: Membership | None
    ) -> ResumeReport:
        """Watch these open handles with what the ledger knows of them: input keys already
        seen (not surfaced again), cancels and answers to resend. Bulk reads: a restart or a
        claim hands over thousands of handles at once."""
        principal = tenant.principal
        digests = await self.db(tenant.input_digests, [t.ref for t in tasks])
        cancels = answers = 0
        for task in tasks:
            self.scheduler.watch(principal, task, lease=lease)
            if task.ref in digests:
                self.scheduler.seed_input_digests(task.ref, digests[task.ref])
            if task.cancel_requested_at_ms is not None:
                self.scheduler.mark_cancel_pending(task.ref)
                cancels += 1
        held = {t.ref for t in tasks}
        for answer in await self.db(tenant.undelivered_answers):
            if answer.task_ref in held:
                self.scheduler.mark_undelivered_answers(answer.task_ref)
                answers += 1
        return ResumeReport(len(tasks), 0, answers, cancels)

    # -- leased polling (several replicas on one ledger) -------------------------------------
    def attach_replica(self, replica: ReplicaLeases) -> None:
        """Poll only the handles this replica leases: claimed ones, and ones it creates."""
        self.replica = replica
        self.scheduler.lease_guard = replica

    async def take_claimed(self, principal: str, member: Membership, tasks: list[TaskView]) -> None:
        taken = await self._watch_all(self.ledger.for_principal(principal), tasks, lease=member)
        self.handover += taken

    async def settle_orphaned_dispatches(
        self, principals: Sequence[str], replica: ReplicaLeases
    ) -> int:
        """Leased mode: dispatches a dead replica incarnation left in flight become unknown."""
        settled = 0
        for principal in principals:
            tenant = self.ledger.for_principal(principal)
            for dispatch in await self.db(TenantLeases(tenant).orphaned_dispatches):
                reason = (
                    f"the replica that sent it stopped with the call {dispatch.state.value}; "
                    "outcome unknown"
                )
                try:
                    await self.db(tenant.mark_dispatch_unknown, dispatch.ref, reason)
                except InvalidTransition:
                    continue  # settled meanwhile (its result arrived, or another replica)
                settled += 1
        return settled

    async def _watch_new(self, principal: str, task: TaskView, due_ms: int | None) -> None:
        """Watch a recorded handle again (a replayed call), leased first in leased mode."""
        lease = None
        if self.replica is not None:
            lease = await self.replica.adopt_task(principal, task.ref)
            if lease is None:
                return  # another replica claimed it in between: it polls it
        self.scheduler.watch(principal, task, due_ms=due_ms, lease=lease)


_LEGACY_TASKS = TaskGeneration.EXPERIMENTAL_2025_11_25


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


def _dump(result: mcp_types.CallToolResult) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


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
