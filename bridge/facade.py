"""The Bridge: one small async API over the ledger, the MCP requester and the UHP client.

Two reconcile loops run side by side and never derive one lifecycle from the other:

* the **outer loop** follows remote UHP responses (stream or re-read) — or, for a run the
  harness serves itself, records the statuses the harness reports;
* the **inner loop** is the poll scheduler watching every open MCP task handle.

With a :class:`~bridge.ledger.coordination.replica.ReplicaConfig`, several bridges (harness
replicas) share one PostgreSQL ledger: each open handle and each remotely followed run is leased to
exactly one of them at a time (see :mod:`bridge.ledger.coordination.replica`); any replica can call
tools, answer, cancel and subscribe.

The only link between them is the ids recorded in the ledger. Where they must interact (the
outer run is cancelled or ends while inner tasks are open), a policy the harness chose decides.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup
from opentelemetry import context as otel_context

from bridge import events as ev
from bridge.ids import is_call_ref
from bridge.ledger.coordination.replica import ReplicaConfig, ReplicaLeases
from bridge.ledger.coordination.waiters import CommitNotifier
from bridge.ledger.runner import LedgerRunner
from bridge.ledger.store import Ledger, TenantLedger
from bridge.lifecycle import Admission, OuterStatus
from bridge.mcp.inputs.task_input_handlers import task_input_request
from bridge.mcp.polling.handle_resumption import ResumeReport
from bridge.outcomes import AnswerReceipt, InputPending, InputRequest, TaskHandle
from bridge.policies import WaitMode
from bridge.run import Run
from bridge.runtime.agent_states import AgentStates
from bridge.runtime.compose import BridgeLeaseHolder, build_replica, build_requester, ledger_runner
from bridge.runtime.outer_runs import OuterRuns
from bridge.runtime.reads import BridgeReads
from bridge.runtime.recovery_report import RecoveryReport
from bridge.runtime.step_results import RecoverableFailure, StepOutcome, TaskPending, TaskSettled
from bridge.runtime.waits import until_answered, until_closed
from bridge.settings import BridgeSettings
from bridge.telemetry.outer_spans import OuterSpans
from bridge.uhp.client import ResponseFollower

LOCAL_SERVER_PREFIX = "local:"


class Bridge(BridgeReads, AgentStates):
    """Open with ``async with Bridge.open(...)``; see docs/guides/embed-in-a-harness.md."""

    def __init__(
        self, ledger: Ledger, settings: BridgeSettings, *, owns_ledger: bool = False
    ) -> None:
        """A bridge on a ledger already open (``settings.ledger_url`` is not used); prefer
        :meth:`open`. ``owns_ledger``: the bridge closes the ledger when it closes."""
        self.settings = settings
        self.ledger = ledger
        self.principals = tuple(settings.principals)
        self.policies = settings.policies
        self._owns_ledger = owns_ledger
        # The composition root: one ledger runner for every part, wired at construction.
        self._db = ledger_runner(ledger)
        self.requester = build_requester(
            ledger,
            self._db,
            settings.mcp_servers,
            settings.credentials,
            settings.scheduler,
            push=settings.push,
            input_handlers=settings.input_handlers,
            input_policy=self.policies.inputs,
            admission_checks=settings.admission_checks,
        )
        self._tg: TaskGroup | None = None
        self._notifier: CommitNotifier | None = None
        self._spans = OuterSpans(ledger, self._db)
        self.last_recovery: RecoveryReport | None = None
        self.replica: ReplicaLeases | None = None
        self._outer = OuterRuns(
            ledger,
            self._db,
            settings.uhp_servers,
            settings.credentials,
            settings.follow,
            self.requester,
            self._spans,
            task_group=lambda: self._tg,
            replica=lambda: self.replica,
            policies=lambda: self.policies,
        )

    @classmethod
    def open(cls, settings: BridgeSettings) -> Bridge:
        """A bridge on ``settings.ledger_url`` (a SQLite file path by default; ``postgresql://…``),
        migrated on open; use it as ``async with Bridge.open(settings) as bridge``."""
        ledger = Ledger.open(settings.ledger_url, sqlite_synchronous=settings.sqlite_synchronous)
        return cls(ledger, settings, owns_ledger=True)

    @property
    def _runner(self) -> LedgerRunner:
        """The bridge's one ledger runner (built above, in the composition root), for the
        gateway (:mod:`bridge.gateway`), which serves MCP clients through this bridge and reads
        and writes the same ledger: its calls must go through the runner the bridge's own parts
        share (inline on SQLite, where this runner awaits a held write lock off the loop's
        back), not a second one. Underscored because it is not for embedders: a host calls the
        bridge's methods, which run the ledger for it; the gateway is part of this package."""
        return self._db

    async def __aenter__(self) -> Bridge:
        self._notifier = CommitNotifier(self.ledger, self._db)
        await self.requester.__aenter__()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        await self._tg.start(self._notifier.run)  # wakes waiters on other processes' commits
        if self.settings.replica is not None:
            await self._join_replicas(self.settings.replica)
        if self.settings.recover_on_start:
            scheduler = self.requester.scheduler
            scheduler.hold()  # take everything back first, then poll it oldest due first
            try:
                self.last_recovery = await self.recover()
            finally:
                scheduler.release()
        if self.replica is not None:
            await self._tg.start(self.replica.run)
        return self

    async def _join_replicas(self, config: ReplicaConfig) -> None:
        outer = self._outer
        holder = BridgeLeaseHolder(self.requester, outer.follows, outer.follow_claimed)
        urls = outer.base_urls
        replica = build_replica(self.ledger, self._db, config, self.principals, holder, urls)
        await replica.register()
        self.requester.attach_replica(replica)
        self.replica = replica

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Unwind in order. An exception raised inside ``async with`` reaches the caller as
        itself: the task groups here would wrap it in an ``ExceptionGroup``, so a group that
        holds nothing but that exception is dropped and the original propagates."""
        assert self._tg is not None and self._notifier is not None
        try:
            await self._unwind(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            if exc is None or not _only(group, exc):
                raise
        return None

    async def _unwind(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._tg is not None and self._notifier is not None
        self._spans.suspend_all()
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            # Whatever the loops raised, unwind the rest in order (task groups are LIFO).
            try:
                with anyio.CancelScope(shield=True):
                    if self.replica is not None:
                        await self.replica.retire()  # others take over now, not a lease later
                    await self._outer.aclose()
            finally:
                await self.requester.__aexit__(exc_type, exc, tb)
                self._notifier.close()
                if self._owns_ledger:
                    self.ledger.close()

    # -- outer runs ------------------------------------------------------------------------
    def run(self, principal: str, run_ref: str) -> Run:
        """The handle of a run already recorded (``run_ref``: its ``run_…`` reference, as a
        registration, an event or ``bridge runs`` gave it). Nothing is read until it is used:
        a run of another principal, or none, is ``NotFound`` then."""
        self._scope(principal)
        return Run(self, principal, run_ref)

    async def run_of(self, principal: str, ref: str) -> Run:
        """The handle of the run a task (``tk_…``) or a call (``op_…``) belongs to: for an
        operator or a gateway that holds such a reference and not its run (``NotFound`` for
        another principal's)."""
        if is_call_ref(ref):
            return Run(self, principal, (await self._get_dispatch(principal, ref)).run_ref)
        return Run(self, principal, (await self._get_task(principal, ref)).run_ref)

    async def register_served_run(
        self,
        principal: str,
        *,
        response_id: str,
        session_id: str | None,
        harness_id: str | None,
        harness: str = "harness",
    ) -> Run:
        """Record a response this harness serves itself (it already knows its ids); its
        handle, through which every step of it goes."""
        self._scope(principal)
        tenant = self.ledger.for_principal(principal)
        run = await self._db(
            tenant.open_run,
            LOCAL_SERVER_PREFIX + harness,
            response_id=response_id,
            session_id=session_id,
            harness_id=harness_id,
            status=OuterStatus.IN_PROGRESS,
        )
        await self._spans.start(principal, run, served=True)
        return Run(self, principal, run.ref)

    async def _record_outer_status(
        self, principal: str, run_ref: str, status: OuterStatus, *, error: Any = None
    ) -> None:
        """The harness reports its own response's status (served runs). Inner tasks are not
        touched, except as the outer-cancel / outer-end policies say."""
        self._scope(principal)
        tenant = self.ledger.for_principal(principal)
        decision = await self._db(tenant.observe_outer, run_ref, status, error=error)
        if decision.records_status and status.is_terminal:
            self._spans.end(run_ref, status)
            await self._outer.apply_policies(principal, run_ref, status)

    async def start_remote_run(
        self, principal: str, uhp_server: str, input: Any, **request: Any
    ) -> ResponseFollower:
        """Start a streaming response on a remote UHP server. The returned follower yields its
        events; if nobody consumes them, call :meth:`follow_remote_run` to reconcile in the
        background instead."""
        self._scope(principal)
        client = await self._outer.client(principal, uhp_server)
        follower = await client.stream_response(input, **request)
        run = await self._db(self.ledger.for_principal(principal).get_run, follower.run_ref)
        await self._spans.start(principal, run, served=False)
        return follower

    def follow_remote_run(self, principal: str, follower: ResponseFollower) -> None:
        """The outer reconcile loop for one remote run: follow it to its terminal state in the
        background, then apply the outer-end policies."""
        self._outer.follow(principal, follower)

    # -- inner steps -------------------------------------------------------------------------
    async def _call_tool(
        self,
        principal: str,
        run_ref: str,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        operation_id: str | None = None,
        wait: WaitMode | None = None,
        wait_deadline_s: float | None = None,
    ) -> StepOutcome:
        """One bridged MCP tool call inside an outer run, waited for as the policy says."""
        self._scope(principal)
        policy = self.policies.for_tool(server, tool)
        mode = wait or policy.wait
        tenant = self.ledger.for_principal(principal)
        parent = await self._spans.context(principal, run_ref)
        token = otel_context.attach(parent) if parent is not None else None
        try:
            outcome = await self.requester.call_tool(
                principal,
                run_ref,
                server,
                tool,
                arguments,
                operation_id=operation_id,
                unknown_outcomes=policy.unknown_outcomes,
            )
            while isinstance(outcome, InputPending) and mode is WaitMode.ASK:
                # MRTR: pause for the host's answers like a task's input; then what the
                # answered leg returned, read back (the operation is replayed, never re-sent).
                op_id = await self._until_answered(tenant, run_ref, outcome.op_ref)
                outcome = await self.requester.call_tool(
                    principal, run_ref, server, tool, arguments, operation_id=op_id
                )
        finally:
            if token is not None:
                otel_context.detach(token)
        if not isinstance(outcome, TaskHandle):
            return outcome
        task = outcome.task
        if not task.is_open or mode is WaitMode.DETACH:
            return (
                TaskSettled(outcome.op_ref, task)
                if not task.is_open
                else (TaskPending(outcome.op_ref, task))
            )
        if mode is WaitMode.FAIL_RECOVERABLE:
            reason = "the call became a task and the policy does not wait for tasks"
            await self._db(tenant.record_step_failure, task.ref, reason)
            return RecoverableFailure(outcome.op_ref, task, reason)
        deadline = wait_deadline_s if wait_deadline_s is not None else policy.wait_deadline_s
        assert self._notifier is not None
        ask = mode is WaitMode.ASK
        return await until_closed(
            self._notifier, self._db, tenant, outcome.op_ref, task, deadline, ask
        )

    async def _until_answered(self, tenant: TenantLedger, run_ref: str, op_ref: str) -> str:
        assert self._notifier is not None
        return await until_answered(self._notifier, self._db, tenant, run_ref, op_ref)

    # -- input requests ----------------------------------------------------------------------
    async def _answer_input(
        self, principal: str, task_ref: str, input_ref: str, response: Any
    ) -> AnswerReceipt:
        """Send a raw answer (the method's own result shape, unchecked) to an input request.
        Prefer :meth:`InputRequest.accept` / ``decline`` / ``cancel`` for elicitations.

        Recorded first (once per request: ``UnknownInputKey`` / ``InputAlreadyAnswered``
        otherwise), then sent; the receipt says whether it was delivered, queued for
        redelivery, or found the task lost."""
        self._scope(principal)
        return await self.requester.answer_input(principal, task_ref, input_ref, response)

    def input_request(self, principal: str, event: ev.InputRequiredEvent) -> InputRequest:
        """The typed request a ``task.input_required`` (or, MRTR, ``call.input_required``)
        event announces."""
        self._scope(principal)
        if isinstance(event, ev.CallInputRequired):
            return self.requester.rounds.input_request(
                principal, event.op_ref, event.input_ref, event.method, event.params
            )
        return self._input_request(
            principal, event.task_ref, event.input_ref, event.method, event.params
        )

    async def pending_inputs(
        self, principal: str, run_ref: str | None = None
    ) -> list[InputRequest]:
        """Unanswered input requests of this principal's open tasks (of one run), oldest
        first, then those of calls waiting for input before any task (MRTR): offer them to
        the user (again, after a restart)."""
        self._scope(principal)
        tenant = self.ledger.for_principal(principal)
        views = await self._db(tenant.pending_input_requests)
        if run_ref is not None:
            of_run = {t.ref for t in await self._db(tenant.list_tasks, run_ref=run_ref)}
            views = [v for v in views if v.task_ref in of_run]
        calls = await self.requester.rounds.pending(principal, run_ref)
        return [
            self._input_request(principal, v.task_ref, v.ref, v.method, v.params) for v in views
        ] + calls

    def _input_request(
        self, principal: str, task_ref: str, input_ref: str, method: str, params: Any
    ) -> InputRequest:
        answer = self.requester.answer_input
        return task_input_request(answer, principal, task_ref, input_ref, method, params)

    # -- cancel, detach ----------------------------------------------------------------------

    async def _cancel_task(self, principal: str, task_ref: str) -> bool:
        """Ask the server to cancel the task ``task_ref`` (``tasks/cancel``, recorded first as
        the host's intent). True when the server acknowledged it; False when the task had
        already ended or the request was refused or could not be sent (then resent before the
        next poll). An acknowledgement is not a stop: the task's status says that."""
        self._scope(principal)
        return await self.requester.cancel_task(principal, task_ref, "host")

    async def _detach_task(self, principal: str, task_ref: str) -> bool:
        """Stop watching a task without cancelling it."""
        self._scope(principal)
        return await self.requester.detach_task(principal, task_ref, "host")

    async def _resolve_unknown_outcome(
        self, principal: str, op_ref: str, admission: Admission
    ) -> None:
        """Say whether a call whose outcome is unknown was admitted by its server (recorded
        once, ``call.admission_checked`` by ``host``); see ``bridge.mcp.calls.admission``."""
        self._scope(principal)
        await self.requester.resolve_unknown_outcome(principal, op_ref, admission)

    # -- events ------------------------------------------------------------------------------
    async def _subscribe(
        self, principal: str, run_ref: str, *, after_seq: int = 0
    ) -> AsyncIterator[ev.BridgeEvent]:
        """The run's events after ``after_seq``, in order, then live. Reconnect with the last
        ``seq`` you saw: nothing is missed and nothing is seen twice."""
        self._scope(principal)
        assert self._notifier is not None
        tenant = self.ledger.for_principal(principal)
        last = after_seq
        limit = 500
        while True:
            with self._notifier.watch(principal, run_ref) as change:  # armed, then read
                batch = await self._db(tenant.events, run_ref, after_seq=last, limit=limit)
                for event in batch:
                    last = event.seq
                    yield event
                # A short batch was all there was when read; the watch was armed before the
                # read, so a later commit has set it: wait here instead of reading again.
                if len(batch) < limit:
                    await change.wait(None)  # woken by a commit on the run (or the backstop)

    # -- recovery ----------------------------------------------------------------------------
    async def recover(self, *, settle_in_flight_dispatches: bool = True) -> RecoveryReport:
        """Pick up everything open in this bridge's scope after a restart.

        Single process: watch every open handle, resume every followed run, and (by default)
        settle dispatches left ``pending``/``sent`` as unknown. Leased mode (a replica among
        several): claim what no live replica holds, and settle only dispatches whose
        dispatching replica incarnation is gone — another replica's call may still be in
        flight.
        """
        if self.replica is not None:
            report = await self._claim_everything_free()
        else:
            resumed: ResumeReport = await self.requester.resume(
                self.principals, settle_in_flight_dispatches=settle_in_flight_dispatches
            )
            report = RecoveryReport(
                tasks_watched=resumed.tasks_watched,
                dispatches_marked_unknown=resumed.dispatches_marked_unknown,
                answers_to_redeliver=resumed.answers_to_redeliver,
                cancels_to_resend=resumed.cancels_to_resend,
            )
        for principal in self.principals:
            tenant = self.ledger.for_principal(principal)
            report.pending_inputs.extend(await self._db(tenant.pending_input_requests))
            report.pending_call_inputs.extend(await self._db(tenant.pending_call_inputs))
            for run in await self._db(tenant.list_runs, open_only=True, limit=10_000):
                served = run.uhp_server.startswith(LOCAL_SERVER_PREFIX)
                if served:
                    report.served_runs_open.append(run.ref)
                elif self.replica is not None:
                    continue  # followed by whichever replica claims it
                if run.trace_id is not None:  # continue the run's trace in this process
                    await self._spans.start(principal, run, served=served)
                resumable = not served and run.response_id is not None
                if resumable and await self._outer.resume(principal, run):
                    report.remote_runs_resumed += 1
            if self.replica is None:  # with replicas, another one's POST may be in flight
                report.unanswered_posts.extend(await self._outer.unanswered_posts(principal))
        return report

    async def _claim_everything_free(self) -> RecoveryReport:
        replica = self.replica
        assert replica is not None
        before = self.requester.handover
        runs_before = replica.claimed_runs
        unknown = await self.requester.settle_orphaned_dispatches(self.principals, replica)
        await replica.claim_everything()
        taken = self.requester.handover - before
        assert self._tg is not None  # answered MRTR legs never sent (one replica wins each)
        legs = await self.requester.rounds.resume(self.principals, self._tg)
        return RecoveryReport(
            tasks_watched=taken.tasks_watched,
            dispatches_marked_unknown=unknown,
            answers_to_redeliver=taken.answers_to_redeliver + legs,
            cancels_to_resend=taken.cancels_to_resend,
            remote_runs_resumed=replica.claimed_runs - runs_before,
        )


def _only(group: BaseExceptionGroup[BaseException], exc: BaseException) -> bool:
    """Does ``group`` (nested groups flattened) hold ``exc`` and nothing else?"""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseExceptionGroup):
            stack.extend(item.exceptions)
        else:
            leaves.append(item)
    return all(leaf is exc for leaf in leaves) and bool(leaves)
