"""The Bridge: one small async API over the ledger, the MCP requester and the UHP client.

Two reconcile loops run side by side and never derive one lifecycle from the other:

* the **outer loop** follows remote UHP responses (stream or re-read) — or, for a run the
  harness serves itself, records the statuses the harness reports;
* the **inner loop** is the poll scheduler watching every open MCP task handle.

With a :class:`~bridge.ReplicaConfig`, several bridges (harness
replicas) share one PostgreSQL ledger: each open handle and each remotely followed run is leased to
exactly one of them at a time (see :mod:`bridge._ledger.coordination.replica`); any replica can call
tools, answer, cancel and subscribe.

The only link between them is the ids recorded in the ledger. Where they must interact (the
outer run is cancelled or ends while inner tasks are open), a policy the harness chose decides.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from anyio.abc import TaskGroup

from bridge._config import ReplicaConfig
from bridge._display import worded
from bridge._errors import BridgeError
from bridge._ids import is_call_ref
from bridge._ledger.commit.availability import watch_the_file
from bridge._ledger.coordination.replica import ReplicaLeases
from bridge._ledger.coordination.waiters import CommitNotifier
from bridge._ledger.fencing import Membership
from bridge._ledger.reader import LedgerReader
from bridge._ledger.reads.attention import (
    DEFAULT_ORPHAN_AFTER_MS,
    DEFAULT_OVERDUE_AFTER_MS,
    AttentionWindow,
)
from bridge._ledger.reads.views import AttentionItem, RunView
from bridge._ledger.retention.policy import RetentionPolicy, policy_for
from bridge._ledger.retention.prune import PruneReport
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._mcp.polling.handle_resumption import ResumeReport
from bridge._outcomes import AnswerReceipt, InputRequest
from bridge._run import Run
from bridge._runtime import reads
from bridge._runtime.compose import BridgeLeaseHolder, ledger_runner
from bridge._runtime.host_polls import HostPolls
from bridge._runtime.outer_runs import OuterRuns
from bridge._runtime.pruner import ScheduledPruner, prune_principal
from bridge._runtime.reads import BridgeServices
from bridge._runtime.recovery_report import RecoveryReport
from bridge._settings import BridgeSettings
from bridge._telemetry.metrics import LEDGER_GAUGES
from bridge._telemetry.outer_spans import OuterSpans

if TYPE_CHECKING:
    import mcp_types

LOCAL_SERVER_PREFIX = "local:"
T = TypeVar("T")


class Bridge:
    """Open with ``async with Bridge.open(...)``; see docs/guides/embed-in-a-harness.md."""

    def __init__(
        self, ledger: Ledger, settings: BridgeSettings, *, owns_ledger: bool = False
    ) -> None:
        """A bridge on a ledger already open (``settings.ledger_url`` is not used); prefer
        :meth:`open`. ``owns_ledger``: the bridge closes the ledger when it closes."""
        self.settings = settings
        self._ledger = ledger
        self.principals = tuple(settings.principals)
        self.policies = settings.policies
        self._owns_ledger = owns_ledger
        # The composition root: one ledger runner for every part, wired at construction.
        self._db = ledger_runner(ledger)
        self._requester = TaskRequester(
            ledger,
            settings.mcp_servers,
            credentials=settings.credentials,
            scheduler=settings.scheduler,
            push=settings.push,
            db=self._db,
            input_handlers=settings.input_handlers,
            input_policy=self.policies.inputs,
            admission_checks=settings.admission_checks,
        )
        self._tg: TaskGroup | None = None
        self._notifier: CommitNotifier | None = None
        self._spans = OuterSpans(ledger, self._db)
        self.last_recovery: RecoveryReport | None = None
        self._replica: ReplicaLeases | None = None
        self._stop_gauges: Callable[[], None] | None = None
        self._deliverer: Any = None  # the webhook deliverer, with settings.webhooks
        self._pruner: ScheduledPruner | None = None
        self._outer = OuterRuns(
            ledger,
            self._db,
            settings.uhp_servers,
            settings.credentials,
            settings.follow,
            self._requester,
            self._spans,
            task_group=lambda: self._tg,
            replica=lambda: self._replica,
            policies=lambda: self.policies,
        )
        self._services = BridgeServices(
            ledger,
            self._db,
            self._requester,
            self._spans,
            self._outer,
            policies=lambda: self.policies,
            notifier=lambda: self._notifier,
        )

    @classmethod
    def open(cls, settings: BridgeSettings) -> Bridge:
        """A bridge on ``settings.ledger_url`` (a SQLite file path by default; ``postgresql://…``),
        migrated on open; use it as ``async with Bridge.open(settings) as bridge``."""
        ledger = Ledger.open(settings.ledger_url, sqlite_synchronous=settings.sqlite_synchronous)
        return cls(ledger, settings, owns_ledger=True)

    async def read(self, principal: str, fn: Callable[[LedgerReader], T]) -> T:
        """``fn``'s value, given a :class:`~bridge.LedgerReader` of ``principal``'s records in
        this bridge's ledger, run as the bridge runs its own ledger calls (never blocking the
        event loop on a network database): ``await bridge.read("acme", lambda r: r.run(ref))``.
        The reader is for ``fn`` only: its reads block, so keep it out of async code."""
        self._scope(principal)
        return await self._db(fn, LedgerReader(self._ledger, principal))

    async def __aenter__(self) -> Bridge:
        self._notifier = CommitNotifier(self._ledger, self._db)
        await self._requester.__aenter__()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        await self._tg.start(self._notifier.run)  # wakes waiters on other processes' commits
        self._tg.start_soon(watch_the_file, self._ledger.engine)  # a deleted file, said at once
        if self.settings.replica is not None:
            await self._join_replicas(self.settings.replica)
        if self.settings.recover_on_start:
            scheduler = self._requester.scheduler
            scheduler.hold()  # take everything back first, then poll it oldest due first
            try:
                self.last_recovery = await self.recover()
            finally:
                scheduler.release()
        if self._replica is not None:
            await self._tg.start(self._replica.run)
        if self.settings.webhooks:
            self._deliverer = self._webhook_deliverer()
            await self._tg.start(self._deliverer.run)
        self._stop_gauges = LEDGER_GAUGES.add(self._ledger, self.principals)
        if self.settings.retention is not None:
            self._pruner = ScheduledPruner(self._ledger, self.settings.retention, self.principals)
            await self._tg.start(self._pruner.run)
        return self

    def _webhook_deliverer(self) -> Any:
        from bridge._runtime.webhook_deliverer import WebhookDeliverer  # extra [webhooks]

        def membership() -> Membership | None:
            replica = self._replica
            return replica.membership if replica is not None and replica.can_act() else None

        return WebhookDeliverer(
            self._ledger,
            self._db,
            self.settings.webhooks,
            self.settings.credentials,
            membership=membership if self._replica is not None else None,
        )

    async def _join_replicas(self, config: ReplicaConfig) -> None:
        outer = self._outer
        holder = BridgeLeaseHolder(self._requester, outer.follows, outer.follow_claimed)
        replica = ReplicaLeases(
            self._ledger, config, self.principals, self._db, holder, uhp_servers=outer.base_urls
        )
        await replica.register()
        self._requester.attach_replica(replica)
        self._replica = replica

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
        if self._stop_gauges is not None:
            self._stop_gauges()
        self._spans.suspend_all()
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            # Whatever the loops raised, unwind the rest in order (task groups are LIFO).
            try:
                with anyio.CancelScope(shield=True):
                    if self._replica is not None:
                        await self._replica.retire()  # others take over now, not a lease later
                    await self._outer.aclose()
            finally:
                await self._requester.__aexit__(exc_type, exc, tb)
                self._notifier.close()
                if self._owns_ledger:
                    self._ledger.close()

    # -- outer runs ------------------------------------------------------------------------
    def run(self, principal: str, run_ref: str) -> Run:
        """The handle of a run already recorded (``run_ref``: its ``run_…`` reference, as a
        registration, an event or ``bridge runs`` gave it). Nothing is read until it is used:
        a run of another principal, or none, is ``NotFound`` then."""
        self._scope(principal)
        return Run(self._services, principal, run_ref)

    async def run_of(self, principal: str, ref: str) -> Run:
        """The handle of the run a task (``tk_…``) or a call (``op_…``) belongs to: for an
        operator or a gateway that holds such a reference and not its run (``NotFound`` for
        another principal's)."""
        self._scope(principal)
        tenant = self._ledger.for_principal(principal)
        if is_call_ref(ref):
            run_ref = (await self._db(tenant.reads.get_dispatch, ref)).run_ref
        else:
            run_ref = (await self._db(tenant.reads.get_task, ref)).run_ref
        return Run(self._services, principal, run_ref)

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
        tenant = self._ledger.for_principal(principal)
        run = await self._db(
            tenant.runs.open_run,
            LOCAL_SERVER_PREFIX + harness,
            response_id=response_id,
            session_id=session_id,
            harness_id=harness_id,
            status=OuterStatus.IN_PROGRESS,
        )
        await self._spans.start(principal, run, served=True)
        return Run(self._services, principal, run.ref)

    async def start_remote_run(
        self, principal: str, uhp_server: str, input: Any, **request: Any
    ) -> Run:
        """Start a streaming response on a remote UHP server; its handle. The bridge follows
        it in the background to its terminal state (recorded, so ``Run.subscribe`` reads it),
        then applies the outer-end policies."""
        self._scope(principal)
        client = await self._outer.client(principal, uhp_server)
        follower = await client.stream_response(input, **request)
        run = await self._db(self._ledger.for_principal(principal).reads.get_run, follower.run_ref)
        await self._spans.start(principal, run, served=False)
        self._outer.follow(principal, follower)
        return Run(self._services, principal, run.ref)

    # -- across runs -----------------------------------------------------------------------
    async def pending_inputs(self, principal: str) -> list[InputRequest]:
        """Unanswered input requests of every run of this principal (its open tasks', oldest
        first, then its calls' waiting for input before any task: MRTR), for an inbox across
        runs; one run's: :meth:`Run.pending_inputs`."""
        self._scope(principal)
        return await reads.pending_inputs(self._services, principal, None)

    async def attention(
        self,
        principal: str | None = None,
        *,
        older_than: float | None = None,
        overdue_after: float = DEFAULT_OVERDUE_AFTER_MS / 1000,
        orphan_after: float = DEFAULT_ORPHAN_AFTER_MS / 1000,
    ) -> list[AttentionItem]:
        """Everything that waits for a person, oldest first: of ``principal``, or of every
        principal this bridge serves (``None``). Each item says what it is (``kind``), since
        when, which run and response, and its next step; it leaves the list once acted upon.

        ``older_than`` (seconds): only items waiting at least that long. An input waiting
        ``overdue_after`` seconds is ``input_overdue``; a served run with nothing recorded
        for ``orphan_after`` seconds is ``orphaned_run`` (docs/architecture.md, glossary).
        """
        principals = self.principals if principal is None else (principal,)
        for name in principals:
            self._scope(name)
        now = self._ledger.clock()
        window = AttentionWindow(
            now_ms=now,
            overdue_after_ms=int(overdue_after * 1000),
            orphan_after_ms=int(orphan_after * 1000),
        )
        items: list[AttentionItem] = []
        for name in principals:
            attention = self._ledger.for_principal(name).attention
            items.extend(map(worded, await self._db(attention.attention, window)))
        if older_than is not None:
            cutoff = now - int(older_than * 1000)
            items = [item for item in items if item.since_ms <= cutoff]
        return sorted(items, key=lambda item: (item.since_ms, item.kind, item.ref))

    async def list_tools(self, principal: str, server: str) -> list[mcp_types.Tool]:
        """The tools ``server`` lists, through the bridge's own connection and credentials
        (the SDK's ``Tool``: name, description, input schema, annotations). Raises
        ``UnknownServer`` or ``ServerConnectFailed``."""
        self._scope(principal)
        return await self._requester.pool.connection(server).list_tools()

    # -- for relays and durable-engine workers built on the bridge --------------------------
    def is_watching(self, task_ref: str) -> bool:
        """Whether this process watches the task now (polls it, or holds its push stream). A
        worker that did not start a call (its starter died, or the task settled) replays the
        call to watch it again; one that did spares the replay's ledger read."""
        return self._requester.scheduler.is_watching(task_ref)

    async def answer_unchecked(
        self, principal: str, owner_ref: str, input_ref: str, response: Any
    ) -> AnswerReceipt:
        """Record, then send, an answer exactly as it came: NOT checked against the request's
        schema. Only for a relay whose upstream server checks it (the MCP gateway passes a
        client's ``tasks/update`` on); a host answers through :class:`InputRequest`
        (``accept``/``decline``/``dismiss``), which checks first. ``owner_ref``: the task
        (``tk_…``) or the call waiting for input (``op_…``)."""
        self._scope(principal)
        return await self._requester.answer_input(principal, owner_ref, input_ref, response)

    async def prune(
        self,
        principal: str,
        *,
        policy: RetentionPolicy | None = None,
        dry_run: bool = False,
        archive: str | Path | None = None,
    ) -> PruneReport:
        """Remove ``principal``'s finished runs the policy lets go, with everything nested in
        them, in short batches while calls go on; never a run that is open, waiting on input,
        holding a lost task, or a call of unknown outcome without a final verdict.

        ``policy``: default ``settings.retention``'s for the principal (``BridgeError`` if there
        is none). ``dry_run``: remove nothing, report what would go. ``archive``: a file the
        removed runs are appended to first (gzip JSON Lines, no raw task ids; ``bridge import``
        restores it). See docs/guides/retention.md.
        """
        self._scope(principal)
        chosen = policy or policy_for(self.settings.retention, principal)
        if chosen is None:
            raise BridgeError(f"no retention policy for principal {principal!r}")
        to = None if archive is None else Path(archive)
        return await prune_principal(self._ledger, principal, chosen, dry_run=dry_run, archive=to)

    def _scope(self, principal: str) -> None:
        if principal not in self.principals:
            raise BridgeError(f"principal {principal!r} is not in this bridge's scope")

    # -- recovery ----------------------------------------------------------------------------
    async def recover(self, *, settle_in_flight_calls: bool = True) -> RecoveryReport:
        """Pick up everything open in this bridge's scope after a restart.

        Single process: watch every open handle, resume every followed run, and (by default)
        settle dispatches left ``pending``/``sent`` as unknown. Leased mode (a replica among
        several): claim what no live replica holds, and settle only dispatches whose
        dispatching replica incarnation is gone — another replica's call may still be in
        flight.
        """
        if self._replica is not None:
            report = await self._claim_everything_free()
        else:
            resumed: ResumeReport = await self._requester.resume(
                self.principals, settle_in_flight_calls=settle_in_flight_calls
            )
            report = RecoveryReport(
                tasks_watched=resumed.tasks_watched,
                calls_marked_unknown=resumed.calls_marked_unknown,
                answers_to_redeliver=resumed.answers_to_redeliver,
                cancels_to_resend=resumed.cancels_to_resend,
            )
        for principal in self.principals:
            tenant = self._ledger.for_principal(principal)
            report.pending_inputs.extend(await self._db(tenant.reads.pending_input_requests))
            report.pending_call_inputs.extend(await self._db(tenant.rounds.pending_call_inputs))
            for run in await self._db(tenant.reads.list_runs, open_only=True, limit=10_000):
                served = run.uhp_server.startswith(LOCAL_SERVER_PREFIX)
                if served:
                    report.served_runs_open.append(run.ref)
                elif self._replica is not None:
                    continue  # followed by whichever replica claims it
                if run.trace_id is not None:  # continue the run's trace in this process
                    await self._spans.start(principal, run, served=served)
                resumable = not served and run.response_id is not None
                if resumable and await self._outer.resume(principal, run):
                    report.remote_runs_resumed += 1
            if self._replica is None:  # with replicas, another one's POST may be in flight
                report.unanswered_posts.extend(await self._outer.unanswered_posts(principal))
        return report

    async def _claim_everything_free(self) -> RecoveryReport:
        replica = self._replica
        assert replica is not None
        before = self._requester.handover
        runs_before = replica.claimed_runs
        unknown = await self._requester.settle_orphaned_dispatches(self.principals)
        await replica.claim_everything()
        taken = self._requester.handover - before
        assert self._tg is not None  # answered MRTR legs never sent (one replica wins each)
        legs = await self._requester.rounds.resume(self.principals, self._tg)
        return RecoveryReport(
            tasks_watched=taken.tasks_watched,
            calls_marked_unknown=unknown,
            answers_to_redeliver=taken.answers_to_redeliver + legs,
            cancels_to_resend=taken.cancels_to_resend,
            remote_runs_resumed=replica.claimed_runs - runs_before,
        )


def _only(group: BaseExceptionGroup[BaseException], exc: BaseException) -> bool:
    """Does ``group`` (nested groups flattened) hold ``exc`` and nothing else?"""
    held, rest = group.split(lambda leaf: leaf is exc)
    return held is not None and rest is None


class GatewayRecords:
    """The gateway's own records in its bridge's ledger (the task handles it gives its clients,
    the newest run it made for an identity), through the bridge's runner. Package-internal, for
    :mod:`bridge.gateway`: a host has no use for them, and reads the rest by :meth:`Bridge.read`."""

    def __init__(self, bridge: Bridge) -> None:
        self._ledger, self._db = bridge._ledger, bridge._db

    async def record_handle(self, principal: str, handle: str, task_ref: str, op_ref: str) -> None:
        handles = self._ledger.for_principal(principal).gateway_handles
        await self._db(handles.record_gateway_handle, handle, task_ref, op_ref)

    async def task_of(self, principal: str, handle: str) -> str | None:
        """The task a handle names (None: unknown, or another principal's)."""
        handles = self._ledger.for_principal(principal).gateway_handles
        return await self._db(handles.gateway_handle_task, handle)

    async def latest_run(
        self, principal: str, server: str, identity: str, separator: str
    ) -> RunView | None:
        """The newest run on ``server`` under ``identity`` (or ``identity<separator><n>``)."""
        reads = self._ledger.for_principal(principal).reads
        return await self._db(reads.latest_run_of, server, identity, separator)


def host_polls(bridge: Bridge, principal: str) -> HostPolls:
    """The handles of ``principal`` as a host whose own durable engine schedules their polls
    reaches them. Package-internal, for :mod:`bridge.integrations.dbos`: a host polls through
    :meth:`Run.poll`."""
    bridge._scope(principal)
    return HostPolls(bridge._requester, principal, lambda: bridge._tg)
