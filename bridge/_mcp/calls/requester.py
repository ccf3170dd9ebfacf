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
the server never took it (:mod:`bridge._mcp.calls.admission`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import anyio
import mcp_types
from anyio.abc import TaskGroup

from bridge._config import (
    CredentialResolver,
    McpServerConfig,
    PushConfig,
    SchedulerConfig,
    no_credentials,
)
from bridge._ids import is_call_ref
from bridge._ledger.coordination.replica import ReplicaLeases
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import CallView, TaskView
from bridge._ledger.rounds import RetryLeg
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import Admission
from bridge._mcp import legacy_shapes as legacy_wire
from bridge._mcp.calls.admission import AdmissionChecks, operation_meta
from bridge._mcp.calls.answers_and_cancels import TaskUpdates
from bridge._mcp.calls.call_progress import progress_relay
from bridge._mcp.calls.operation_replay import CallReplays
from bridge._mcp.calls.reply_recording import CallReplies
from bridge._mcp.calls.unknown_outcome_retries import UnknownOutcomeRetries
from bridge._mcp.failures import FailureKind, classify
from bridge._mcp.inputs.call_round_handlers import CallInputs
from bridge._mcp.inputs.call_rounds import CallRounds, wire_responses
from bridge._mcp.inputs.handlers import InputHandlers
from bridge._mcp.inputs.legacy_held_result import install_legacy_inputs
from bridge._mcp.inputs.task_input_handlers import TaskInputs
from bridge._mcp.polling.handle_resumption import HandleResumption, HostPoll, ResumeReport
from bridge._mcp.polling.push import PushUpdates
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._mcp.servers import ServerConnection, ServerPool
from bridge._mcp.wire.call_listener import marked_meta
from bridge._mcp.wire.generations import TaskGeneration, negotiated_generation
from bridge._mcp.wire.shapes import CreateTaskResult, with_related_task_ids
from bridge._outcomes import (
    AnswerReceipt,
    CallOutcome,
    InlineResult,
    RejectedCall,
    UnknownOutcome,
)
from bridge._policies import InputPolicy, UnknownOutcomePolicy
from bridge._redaction import install_log_redaction
from bridge._telemetry import spans as telemetry


class TaskRequester:
    """Bridged MCP tool calls for any number of outer runs, with one poll scheduler."""

    def __init__(
        self,
        ledger: Ledger,
        servers: Sequence[McpServerConfig],
        *,
        credentials: CredentialResolver = no_credentials,
        scheduler: SchedulerConfig | None = None,
        push: PushConfig | None = None,
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
        self._push_config = push
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
        self._resumption = HandleResumption(
            ledger, self.db, lambda: self.scheduler, lambda: self.replica
        )
        self._replays = CallReplays(self.db, self._resumption, self.rounds, self.retries)
        self._replies = CallReplies(
            self.db, lambda: self.scheduler, lambda: self.replica, self._clock, self.emit_task_span
        )

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
        self._push = PushUpdates(self._scheduler, self._pool, self._tg, self._push_config)
        self._updates = TaskUpdates(
            self.ledger, self.db, self._pool, self._scheduler, self.emit_task_span
        )
        self._scheduler.inputs = TaskInputs(
            self.ledger, self.db, self._pool, self._scheduler, self._tg, self.input_handlers
        ).with_policy(self.input_policy, self.answer_input, self.cancel_task, self._clock)
        self.rounds.on_inputs = CallInputs(  # MRTR inputs: the same handlers, on the call
            self.ledger, self.db, self.rounds, self._tg, self.input_handlers, self.input_policy
        ).recorded
        install_legacy_inputs(
            self.ledger, self.db, self._pool, self._scheduler, self._tg, self.input_handlers
        )
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
        """The listen streams for pushed task states (``bridge._mcp.polling.push``)."""
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
            previous = await self.db(tenant.reads.find_dispatch, operation_id)
            if previous is not None:
                return await self._replays.replay(tenant, previous, run_ref, tool, arguments)
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
            # Inline: committed alone; in worker threads: in a commit shared with other callers.
            staged_intent = tenant.calls.stage_dispatch(run_ref, **intent_fields)
            intent = await self.db.commit(tenant.group_commit, staged_intent)
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
        intent: CallView,
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
            if config.related_task_ids and generation is TaskGeneration.EXTENSION:
                meta = with_related_task_ids(meta, await self._earlier_tasks(tenant, intent))
            with marked_meta(meta) as sent_meta:  # an upstream's logs, elicitations
                if generation is TaskGeneration.EXPERIMENTAL_2025_11_25:
                    reply: Any = await legacy_wire.call_tool(
                        connection, session, tool, arguments, meta=sent_meta
                    )
                else:
                    reply = await session.call_tool(
                        tool,
                        arguments,
                        read_timeout_seconds=config.request_timeout_s,
                        progress_callback=progress_relay(),
                        allow_claimed=connection.declare_tasks,
                        allow_input_required=True,
                        input_responses=wire_responses(leg) if leg is not None else None,
                        request_state=leg.request_state if leg is not None else None,
                        meta=sent_meta,  # type: ignore[arg-type]
                    )
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                unknown = tenant.calls.mark_dispatch_unknown
                await self.db(unknown, intent.ref, f"bridge error: {exc!r}")
                raise
            if failure.kind is FailureKind.MALFORMED:
                await self._replies.invalid(tenant, intent, connection, exc, failure)
            if failure.leaves_call_outcome_unknown:
                await self.db(tenant.calls.mark_dispatch_unknown, intent.ref, failure.detail)
                return UnknownOutcome(
                    intent.ref, failure.detail, retry_after_ms=failure.retry_after_ms
                )
            error = failure.as_error_object()
            settled = await self.db(tenant.calls.record_call_error, intent.ref, error)
            return RejectedCall(intent.ref, settled.result["error"])
        # (a CallToolResult is told apart first: isinstance on a pydantic class is not free)
        if type(reply) is not mcp_types.CallToolResult:
            if isinstance(reply, CreateTaskResult):
                return await self._replies.record_handle(
                    tenant, connection, intent, reply, generation
                )
            if isinstance(reply, mcp_types.InputRequiredResult):
                return await self.rounds.received(tenant, connection, intent, reply, arguments)
        elif reply.result_type != "complete":
            # A resultType no spec defines: its content is not a result the bridge may hand out.
            await self._replies.unknown_result_type(tenant, intent, reply.result_type)
        result = _dump(reply)
        staged = tenant.calls.stage_immediate_result(result, intent=intent)
        settled = await self.db.commit(tenant.group_commit, staged)
        return InlineResult(intent.ref, settled.result, truncated=settled.result_truncated)

    async def _earlier_tasks(self, tenant: TenantLedger, intent: CallView) -> list[str]:
        """The raw ids of the tasks this call's run created on its server, oldest first."""
        tasks = await self.db(tenant.reads.list_tasks, run_ref=intent.run_ref)
        return [t.task_id for t in tasks if t.server_endpoint == intent.server_endpoint]

    async def resolve_unknown_outcome(
        self, principal: str, op_ref: str, admission: Admission, by: str = "host"
    ) -> None:
        """The host's verdict on a call whose outcome is unknown (``call.admission_checked``
        with ``decided_by="host"``). Raises ``InvalidTransition`` unless the dispatch is
        ``unknown`` and not resolved yet. After ``not_admitted``, calling again with the same
        operation id sends the call once more (same duplicate-prevention key)."""
        tenant = self.ledger.for_principal(principal)
        await self.db(tenant.calls.record_admission, op_ref, admission, "host", by)

    # -- input, cancel, detach -------------------------------------------------------------
    async def answer_input(
        self, principal: str, task_ref: str, input_ref: str, response: Any
    ) -> AnswerReceipt:
        """Answer one input request of a task (see :meth:`TaskUpdates.answer_input`), or of a
        call waiting for input (``task_ref`` is then the call's ``op_ref``;
        see :mod:`bridge._mcp.inputs.call_rounds`)."""
        if is_call_ref(task_ref):
            return await self.rounds.answer(principal, task_ref, input_ref, response)
        return await self.updates.answer_input(principal, task_ref, input_ref, response)

    async def cancel_task(self, principal: str, task_ref: str, requested_by: str = "host") -> bool:
        """Ask the server to cancel (see :meth:`TaskUpdates.cancel_task`)."""
        return await self.updates.cancel_task(principal, task_ref, requested_by)

    async def detach_task(self, principal: str, task_ref: str, requested_by: str = "host") -> bool:
        """Stop watching a task without cancelling it (recorded, with an event)."""
        tenant = self.ledger.for_principal(principal)
        detached = await self.db(tenant.tasks.detach_task, task_ref, requested_by)
        self.scheduler.forget(task_ref)
        return detached

    async def poll_now(
        self,
        principal: str,
        task_ref: str,
        carried: HostPoll | None = None,
        *,
        due_ms: int | None = None,
        known: TaskView | None = None,
    ) -> tuple[TaskView, HostPoll]:
        """Poll one handle now; its next poll is the caller's (see
        :meth:`HandleResumption.poll_now`)."""
        return await self._resumption.poll_now(
            principal, task_ref, carried, due_ms=due_ms, known=known
        )

    async def watch_again(self, principal: str, task: TaskView) -> None:
        """Watch a recorded handle here again (a host hands it back; see
        :meth:`HandleResumption.watch_again`)."""
        await self._resumption.watch_again(principal, task)

    async def take_back_cancelled(self, principal: str, requested_by: str) -> ResumeReport:
        """Watch the open handles a host's policy asked to cancel, resending a cancel never
        acknowledged (see :meth:`HandleResumption.take_back_cancelled`)."""
        return await self._resumption.take_back_cancelled(principal, requested_by)

    def emit_task_span(self, principal: str, task_ref: str) -> None:
        """Emit the lifetime span of a task that just closed (when tracing is configured)."""
        if not telemetry.enabled():
            return
        tenant = self.ledger.for_principal(principal)
        task = tenant.reads.get_task(task_ref)
        if task.terminal_at_ms is None and task.lost_reason is None:
            return  # detached, not ended: its lifetime is not over
        dispatch = tenant.reads.get_dispatch(task.op_ref)
        run = tenant.reads.get_run(task.run_ref)
        events = tenant.reads.events(task.run_ref)
        telemetry.emit_task_span(
            task, run, dispatch.trace_id, dispatch.span_id, events, self.ledger.clock()
        )

    # -- restart -----------------------------------------------------------------------------
    async def resume(
        self, principals: Sequence[str], *, settle_in_flight_calls: bool = True
    ) -> ResumeReport:
        """Pick up every open handle of these principals after a restart (any process).

        Dispatches left ``pending``/``sent`` by a process that died become ``unknown`` (with an
        event): nobody can tell whether they reached the server. Only settle them when no other
        live process is dispatching for these principals.
        """
        report = await self._resumption.resume(
            principals, settle_in_flight_calls=settle_in_flight_calls
        )
        assert self._tg is not None  # MRTR rounds answered whose next leg never left:
        legs = await self.rounds.resume(principals, self._tg)
        return report + ResumeReport(answers_to_redeliver=legs)

    # -- leased polling (several replicas on one ledger) -------------------------------------
    def attach_replica(self, replica: ReplicaLeases) -> None:
        """Poll only the handles this replica leases: claimed ones, and ones it creates."""
        self.replica = replica
        self.scheduler.lease_guard = replica

    async def take_claimed(self, principal: str, member: Membership, tasks: list[TaskView]) -> None:
        tenant = self.ledger.for_principal(principal)
        self.handover += await self._resumption.watch_all(tenant, tasks, lease=member)

    async def settle_orphaned_dispatches(self, principals: Sequence[str]) -> int:
        """Leased mode: dispatches a dead replica incarnation left in flight become unknown."""
        return await self._resumption.settle_orphaned(principals)


_LEGACY_TASKS = TaskGeneration.EXPERIMENTAL_2025_11_25


def _dump(result: mcp_types.CallToolResult) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped
