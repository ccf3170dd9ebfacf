"""The Bridge: one small async API over the ledger, the MCP requester and the UHP client.

Two reconcile loops run side by side and never derive one lifecycle from the other:

* the **outer loop** follows remote UHP responses (stream or re-read) — or, for a run the
  harness serves itself, records the statuses the harness reports;
* the **inner loop** is the poll scheduler watching every open MCP task handle.

With a :class:`~bridge.replica.ReplicaConfig`, several bridges (harness replicas) share one
PostgreSQL ledger: each open handle and each remotely followed run is leased to exactly one of
them at a time (see :mod:`bridge.replica`); any replica can call tools, answer, cancel and
subscribe.

The only link between them is the ids recorded in the ledger. Where they must interact (the
outer run is cancelled or ends while inner tasks are open), a policy the harness chose decides.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from bridge import events as ev
from bridge import telemetry
from bridge.errors import BridgeError, LeaseLost
from bridge.ledger.fencing import Membership
from bridge.ledger.store import Ledger
from bridge.ledger.views import InputRequestView, RunView, TaskView
from bridge.lifecycle import OuterStatus, TaskStatus
from bridge.mcp.outcomes import CallOutcome, TaskHandle
from bridge.mcp.requester import ResumeReport, TaskRequester
from bridge.mcp.scheduler import SchedulerConfig
from bridge.mcp.servers import CredentialResolver, McpServerConfig, no_credentials
from bridge.policies import OnOuterCancel, OnOuterEnd, Policies, WaitMode
from bridge.replica import ReplicaConfig, ReplicaLeases
from bridge.uhp.client import FollowConfig, ResponseFollower, UhpClient

LOCAL_SERVER_PREFIX = "local:"
SUBSCRIBE_POLL_S = 0.25  # events written by other processes are picked up this often


@dataclass(frozen=True, slots=True)
class UhpServerConfig:
    """A remote UHP server the bridge may follow runs on. The token is given by reference."""

    name: str
    base_url: str
    credential_ref: str


# -- what a bridged step returns ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TaskSettled:
    """The step waited and the task reached a terminal status (or was declared lost)."""

    op_ref: str
    task: TaskView

    @property
    def status(self) -> TaskStatus:
        return self.task.status

    @property
    def lost(self) -> bool:
        return self.task.lost_reason is not None


@dataclass(frozen=True, slots=True)
class TaskPending:
    """``detach``: the handle is durable and watched; the result arrives later as an event."""

    op_ref: str
    task: TaskView


@dataclass(frozen=True, slots=True)
class StepFailedRecoverably:
    """The step stopped waiting (deadline, or ``fail_recoverable``). Not a result: the handle
    is kept and watched, a ``step.recoverable_failure`` event says so."""

    op_ref: str
    task: TaskView
    reason: str


StepOutcome = CallOutcome | TaskSettled | TaskPending | StepFailedRecoverably


@dataclass(slots=True)
class RecoveryReport:
    tasks_watched: int = 0
    dispatches_marked_unknown: int = 0
    answers_to_redeliver: int = 0
    cancels_to_resend: int = 0
    remote_runs_resumed: int = 0
    served_runs_open: list[str] = field(default_factory=list)
    # Surfaced before the restart and still unanswered: offer them to the host again, keyed by
    # input_ref (the same reference the original task.input_required event carried).
    pending_inputs: list[InputRequestView] = field(default_factory=list)


class _Notifier:
    """Wakes subscribers when this process commits events for a run."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._waiting: dict[str, anyio.Event] = {}
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        ledger.add_listener(self._on_commit)

    def close(self) -> None:
        self._ledger.remove_listener(self._on_commit)

    def _on_commit(self, _principal: str, run_ref: str, _seq: int) -> None:
        if threading.get_ident() == self._loop_thread:
            self._fire(run_ref)
            return
        with contextlib.suppress(RuntimeError):  # loop gone: pollers still see the event
            anyio.from_thread.run_sync(self._fire, run_ref, token=self._token)

    def _fire(self, run_ref: str) -> None:
        event = self._waiting.pop(run_ref, None)
        if event is not None:
            event.set()

    async def wait(self, run_ref: str, timeout: float) -> None:
        event = self._waiting.setdefault(run_ref, anyio.Event())
        with anyio.move_on_after(timeout):
            await event.wait()


class Bridge:
    """Open with ``async with Bridge.open(...)``; see docs/embed-in-a-harness guide."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        principals: Sequence[str],
        mcp_servers: Sequence[McpServerConfig] = (),
        uhp_servers: Sequence[UhpServerConfig] = (),
        credentials: CredentialResolver = no_credentials,
        policies: Policies | None = None,
        scheduler: SchedulerConfig | None = None,
        follow: FollowConfig | None = None,
        recover_on_start: bool = True,
        owns_ledger: bool = False,
        replica: ReplicaConfig | None = None,
    ) -> None:
        if not principals:
            raise ValueError("a bridge serves at least one principal/tenant")
        self.ledger = ledger
        self.principals = tuple(principals)
        self.policies = policies or Policies()
        self._uhp_servers = {s.name: s for s in uhp_servers}
        self._credentials = credentials
        self._follow = follow
        self._recover_on_start = recover_on_start
        self._owns_ledger = owns_ledger
        self.requester = TaskRequester(
            ledger, mcp_servers, credentials=credentials, scheduler=scheduler
        )
        self._tg: TaskGroup | None = None
        self._notifier: _Notifier | None = None
        self._uhp_clients: dict[tuple[str, str], UhpClient] = {}
        self._outer_spans: dict[str, Span] = {}  # run_ref -> live uhp.response span
        self.last_recovery: RecoveryReport | None = None
        self._replica_config = replica
        self.replica: ReplicaLeases | None = None
        self._follows: dict[str, anyio.CancelScope] = {}  # run_ref -> its follower

    @classmethod
    def open(cls, url: str | Path | None = None, **options: Any) -> Bridge:
        """A bridge on a ledger URL (SQLite file path by default; ``postgresql://…``)."""
        return cls(Ledger.open(url), owns_ledger=True, **options)

    async def __aenter__(self) -> Bridge:
        self._notifier = _Notifier(self.ledger)
        await self.requester.__aenter__()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        if self._replica_config is not None:
            await self._join_replicas(self._replica_config)
        if self._recover_on_start:
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
        replica = ReplicaLeases(self.ledger, config, self.principals, self.requester.db)
        await replica.register()
        self.requester.attach_replica(replica)
        replica.on_runs = self._follow_claimed
        replica.on_lost = self._drop_leased
        replica.followed_runs = lambda: len(self._follows)
        replica.uhp_servers = [s.base_url.rstrip("/") for s in self._uhp_servers.values()]
        self.replica = replica

    def _drop_leased(self) -> None:
        """This replica's membership lapsed: stop every leased poll and follower."""
        self.requester.scheduler.forget_leased()
        for scope in self._follows.values():
            scope.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._tg is not None and self._notifier is not None
        for span in self._outer_spans.values():
            span.set_attribute("bridge.suspended", True)  # the run goes on in a later process
            span.end()
        self._outer_spans.clear()
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            # Whatever the loops raised, unwind the rest in order (task groups are LIFO).
            try:
                with anyio.CancelScope(shield=True):
                    if self.replica is not None:
                        await self.replica.retire()  # others take over now, not a lease later
                    for client in self._uhp_clients.values():
                        await client.__aexit__(None, None, None)
            finally:
                await self.requester.__aexit__(exc_type, exc, tb)
                self._notifier.close()
                if self._owns_ledger:
                    self.ledger.close()

    def _scope(self, principal: str) -> None:
        if principal not in self.principals:
            raise BridgeError(f"principal {principal!r} is not in this bridge's scope")

    # -- outer runs ------------------------------------------------------------------------
    async def register_served_run(
        self,
        principal: str,
        *,
        response_id: str,
        session_id: str | None,
        harness_id: str | None,
        harness: str = "harness",
    ) -> RunView:
        """Record a response this harness serves itself (it already knows its ids)."""
        self._scope(principal)
        tenant = self.ledger.for_principal(principal)
        run = await self.requester.db(
            tenant.open_run,
            LOCAL_SERVER_PREFIX + harness,
            response_id=response_id,
            session_id=session_id,
            harness_id=harness_id,
            status=OuterStatus.IN_PROGRESS,
        )
        return await self._start_outer_span(principal, run, served=True)

    async def _start_outer_span(self, principal: str, run: RunView, *, served: bool) -> RunView:
        """Start the run's ``uhp.response`` span; a run already traced (by an earlier process)
        continues its recorded trace."""
        if run.ref in self._outer_spans:
            return run
        resumed = run.trace_id is not None
        span = telemetry.start_outer_span(run, served=served, resumed=resumed)
        self._outer_spans[run.ref] = span
        ids = telemetry.span_ids(span)
        if ids is not None and not resumed:
            tenant = self.ledger.for_principal(principal)
            await self.requester.db(tenant.record_trace_context, run.ref, *ids)
            return await self.requester.db(tenant.get_run, run.ref)
        return run

    def _end_outer_span(self, run_ref: str, status: OuterStatus) -> None:
        span = self._outer_spans.pop(run_ref, None)
        if span is not None:
            telemetry.end_outer_span(span, status.value)

    async def _outer_context(self, principal: str, run_ref: str) -> Context | None:
        span = self._outer_spans.get(run_ref)
        if span is not None:
            return trace.set_span_in_context(span)
        run = await self.requester.db(self.ledger.for_principal(principal).get_run, run_ref)
        return telemetry.remote_context(run.trace_id, run.span_id)

    async def record_outer_status(
        self, principal: str, run_ref: str, status: OuterStatus, *, error: Any = None
    ) -> None:
        """The harness reports its own response's status (served runs). Inner tasks are not
        touched, except as the outer-cancel / outer-end policies say."""
        self._scope(principal)
        tenant = self.ledger.for_principal(principal)
        decision = await self.requester.db(tenant.observe_outer, run_ref, status, error=error)
        if decision.records_status and status.is_terminal:
            self._end_outer_span(run_ref, status)
            await self._apply_outer_policies(principal, run_ref, status)

    async def start_remote_run(
        self, principal: str, uhp_server: str, input: Any, **request: Any
    ) -> ResponseFollower:
        """Start a streaming response on a remote UHP server. The returned follower yields its
        events; if nobody consumes them, call :meth:`follow_remote_run` to reconcile in the
        background instead."""
        self._scope(principal)
        client = await self._uhp_client(principal, uhp_server)
        follower = await client.stream_response(input, **request)
        run = await self.requester.db(
            self.ledger.for_principal(principal).get_run, follower.run_ref
        )
        await self._start_outer_span(principal, run, served=False)
        return follower

    def follow_remote_run(self, principal: str, follower: ResponseFollower) -> None:
        """The outer reconcile loop for one remote run: follow it to its terminal state in the
        background, then apply the outer-end policies."""
        assert self._tg is not None
        self._tg.start_soon(self._reconcile_remote, principal, follower)

    async def _follow_claimed(
        self, principal: str, member: Membership, runs: list[RunView]
    ) -> None:
        """Runs this replica just claimed: follow each from its recorded sequence."""
        for run in runs:
            if run.ref in self._follows:
                continue
            if run.trace_id is not None:
                await self._start_outer_span(principal, run, served=False)
            await self._resume_remote(principal, run, lease=member)

    async def _reconcile_remote(self, principal: str, follower: ResponseFollower) -> None:
        with anyio.CancelScope() as scope:
            self._follows[follower.run_ref] = scope
            try:
                async with follower:
                    final = await follower.until_terminal()
            except LeaseLost:
                return  # another replica follows it now
            finally:
                self._follows.pop(follower.run_ref, None)
        if scope.cancelled_caught:
            return
        status = final.outer_status
        if status is not None and status.is_terminal:
            self._end_outer_span(follower.run_ref, status)
            await self._apply_outer_policies(principal, follower.run_ref, status)

    async def _uhp_client(self, principal: str, name: str) -> UhpClient:
        key = (principal, name)
        client = self._uhp_clients.get(key)
        if client is None:
            config = self._uhp_servers.get(name)
            if config is None:
                raise BridgeError(f"no UHP server named {name!r} is configured")
            token = self._credentials(config.credential_ref) or ""
            client = UhpClient(
                config.base_url,
                token=token,
                ledger=self.ledger,
                principal=principal,
                follow=self._follow,
            )
            await client.__aenter__()
            if self.replica is not None:
                client.lease_run = functools.partial(self.replica.adopt_run, principal)
            self._uhp_clients[key] = client
        return client

    def _uhp_server_named(self, base_url: str) -> str | None:
        return next(
            (s.name for s in self._uhp_servers.values() if s.base_url.rstrip("/") == base_url),
            None,
        )

    async def _apply_outer_policies(
        self, principal: str, run_ref: str, status: OuterStatus
    ) -> None:
        tenant = self.ledger.for_principal(principal)
        open_tasks = await self.requester.db(tenant.list_tasks, run_ref=run_ref, open_only=True)
        if not open_tasks:
            return
        refs = [t.ref for t in open_tasks]
        if status is OuterStatus.CANCELLED and (
            self.policies.on_outer_cancel is OnOuterCancel.CANCEL_INNER
        ):
            await self.requester.db(
                tenant.record_open_tasks_at_end, run_ref, status, refs, "cancel_requested"
            )
            for task in open_tasks:
                await self.requester.cancel_task(principal, task.ref, "policy:outer_cancelled")
            return
        if self.policies.on_outer_end is OnOuterEnd.REPORT:
            await self.requester.db(
                tenant.record_open_tasks_at_end, run_ref, status, refs, "reported"
            )
            for task in open_tasks:
                await self.requester.detach_task(principal, task.ref, "policy:outer_ended")

    # -- inner steps -------------------------------------------------------------------------
    async def call_tool(
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
        parent = await self._outer_context(principal, run_ref)
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
        tenant = self.ledger.for_principal(principal)
        if mode is WaitMode.FAIL_RECOVERABLE:
            reason = "the call became a task and the policy does not wait for tasks"
            await self.requester.db(tenant.record_step_failure, task.ref, reason)
            return StepFailedRecoverably(outcome.op_ref, task, reason)
        deadline = wait_deadline_s if wait_deadline_s is not None else policy.wait_deadline_s
        return await self._wait(principal, outcome.op_ref, task, deadline, mode is WaitMode.ASK)

    async def _wait(
        self, principal: str, op_ref: str, task: TaskView, deadline_s: float, ask: bool
    ) -> StepOutcome:
        """Block until the task closes. ASK does not count time spent waiting for input."""
        assert self._notifier is not None
        tenant = self.ledger.for_principal(principal)
        budget = deadline_s
        while True:
            current = await self.requester.db(tenant.get_task, task.ref)
            if not current.is_open:
                return TaskSettled(op_ref, current)
            if budget <= 0:
                reason = f"the step's wait deadline ({deadline_s:g} s) passed"
                await self.requester.db(tenant.record_step_failure, task.ref, reason)
                return StepFailedRecoverably(op_ref, current, reason)
            started = anyio.current_time()
            await self._notifier.wait(current.run_ref, min(budget, SUBSCRIBE_POLL_S))
            waiting_for_host = ask and current.status is TaskStatus.INPUT_REQUIRED
            if not waiting_for_host:
                budget -= anyio.current_time() - started

    async def answer_input(
        self, principal: str, task_ref: str, input_ref: str, response: Any
    ) -> bool:
        """Answer an input request the host decided on (``task.input_required`` event)."""
        self._scope(principal)
        return await self.requester.answer_input(principal, task_ref, input_ref, response)

    async def cancel_task(self, principal: str, task_ref: str) -> bool:
        self._scope(principal)
        return await self.requester.cancel_task(principal, task_ref, "host")

    async def detach_task(self, principal: str, task_ref: str) -> bool:
        """Stop watching a task without cancelling it."""
        self._scope(principal)
        return await self.requester.detach_task(principal, task_ref, "host")

    # -- events ------------------------------------------------------------------------------
    async def subscribe(
        self, principal: str, run_ref: str, *, after_seq: int = 0
    ) -> AsyncIterator[ev.BridgeEvent]:
        """The run's events after ``after_seq``, in order, then live. Reconnect with the last
        ``seq`` you saw: nothing is missed and nothing is seen twice."""
        self._scope(principal)
        assert self._notifier is not None
        tenant = self.ledger.for_principal(principal)
        last = after_seq
        while True:
            batch = await self.requester.db(tenant.events, run_ref, after_seq=last, limit=500)
            for event in batch:
                last = event.seq
                yield event
            if not batch:
                await self._notifier.wait(run_ref, SUBSCRIBE_POLL_S)

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
            report.pending_inputs.extend(await self.requester.db(tenant.pending_input_requests))
            for run in await self.requester.db(tenant.list_runs, open_only=True, limit=10_000):
                served = run.uhp_server.startswith(LOCAL_SERVER_PREFIX)
                if served:
                    report.served_runs_open.append(run.ref)
                elif self.replica is not None:
                    continue  # followed by whichever replica claims it
                if run.trace_id is not None:  # continue the run's trace in this process
                    await self._start_outer_span(principal, run, served=served)
                resumable = not served and run.response_id is not None
                if resumable and await self._resume_remote(principal, run):
                    report.remote_runs_resumed += 1
        return report

    async def _claim_everything_free(self) -> RecoveryReport:
        replica = self.replica
        assert replica is not None
        before = self.requester.handover
        runs_before = replica.claimed_runs
        unknown = await self.requester.settle_orphaned_dispatches(self.principals, replica)
        await replica.claim_everything()
        taken = self.requester.handover - before
        return RecoveryReport(
            tasks_watched=taken.tasks_watched,
            dispatches_marked_unknown=unknown,
            answers_to_redeliver=taken.answers_to_redeliver,
            cancels_to_resend=taken.cancels_to_resend,
            remote_runs_resumed=replica.claimed_runs - runs_before,
        )

    async def _resume_remote(
        self, principal: str, run: RunView, *, lease: Membership | None = None
    ) -> bool:
        """Follow a recorded run again from its last seen sequence (``lease``: claimed by this
        replica). False when no configured UHP server serves it."""
        name = self._uhp_server_named(run.uhp_server)
        if name is None:
            return False
        client = await self._uhp_client(principal, name)
        self.follow_remote_run(principal, await client.follow(run.ref, lease=lease))
        return True
