"""Handing recorded open handles to this process's poll scheduler, and settling the calls a
stopped process left in flight.

Three ways a handle comes back: a restart (:meth:`HandleResumption.resume`, every open handle of
the principals), a replica's claim (:meth:`HandleResumption.watch_all` with its lease), and a
replayed call (:meth:`HandleResumption.watch_again`). Each is watched with what the ledger knows
of it: input keys already seen, cancels and answers still to send. A fourth is not watched at
all: a host whose own durable engine schedules the polls (:meth:`HandleResumption.poll_now`)
takes the handle one poll at a time, with the same knowledge.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, replace

from bridge import events as ev
from bridge._errors import InvalidTransition
from bridge._ledger.coordination.leases import TenantLeases
from bridge._ledger.coordination.replica import ReplicaLeases
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import CallState, TaskStatus
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._mcp.polling.watches import Watch


@dataclass(frozen=True, slots=True)
class ResumeReport:
    tasks_watched: int = 0
    calls_marked_unknown: int = 0
    answers_to_redeliver: int = 0
    cancels_to_resend: int = 0

    def __add__(self, other: ResumeReport) -> ResumeReport:
        return ResumeReport(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: ResumeReport) -> ResumeReport:
        return ResumeReport(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


class HandleResumption:
    """Built by the requester; ``scheduler`` and ``replica`` are read when used (the scheduler
    exists only inside ``async with``, the replica once attached)."""

    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        scheduler: Callable[[], PollScheduler],
        replica: Callable[[], ReplicaLeases | None],
    ) -> None:
        self._ledger = ledger
        self._db = db
        self._scheduler = scheduler
        self._replica = replica

    async def resume(
        self, principals: Sequence[str], *, settle_in_flight_calls: bool
    ) -> ResumeReport:
        """Every open handle of these principals, watched again; with
        ``settle_in_flight_calls``, dispatches left ``pending``/``sent`` become unknown."""
        watched = unknown = answers = cancels = 0
        for principal in principals:
            tenant = self._ledger.for_principal(principal)
            if settle_in_flight_calls:
                stuck = await self._db(
                    tenant.reads.list_dispatches, states=[CallState.PENDING, CallState.SENT]
                )
                for dispatch in stuck:
                    await self._db(
                        tenant.calls.mark_dispatch_unknown,
                        dispatch.ref,
                        f"process stopped with the call {dispatch.state.value}; outcome unknown",
                    )
                    unknown += 1
            tasks = await self._db(tenant.reads.list_tasks, open_only=True)
            seeded = await self.watch_all(tenant, tasks, lease=None)
            watched += len(tasks)
            cancels += seeded.cancels_to_resend
            answers += seeded.answers_to_redeliver
        return ResumeReport(watched, unknown, answers, cancels)

    async def watch_all(
        self, tenant: TenantLedger, tasks: Sequence[TaskView], lease: Membership | None
    ) -> ResumeReport:
        """Watch these open handles with what the ledger knows of them: input keys already
        seen (not surfaced again), cancels and answers to resend. Bulk reads: a restart or a
        claim hands over thousands of handles at once."""
        principal = tenant.principal
        digests = await self._db(tenant.reads.input_digests, [t.ref for t in tasks])
        cancels = answers = 0
        for task in tasks:
            # First poll when the ledger last said it is due: overdue handles at once (oldest
            # first), the others not before their interval, so that taking over 100,000
            # handles does not poll every one of them in the same second.
            self._scheduler().watch(principal, task, due_ms=task.next_poll_due_ms, lease=lease)
            if task.ref in digests:
                self._scheduler().seed_input_digests(task.ref, digests[task.ref])
            if _cancel_unacknowledged(task):
                self._scheduler().mark_cancel_pending(task.ref)
                cancels += 1
        held = {t.ref for t in tasks}
        for answer in await self._db(tenant.inputs.undelivered_answers):
            if answer.task_ref in held:
                self._scheduler().mark_undelivered_answers(answer.task_ref)
                answers += 1
        return ResumeReport(len(tasks), 0, answers, cancels)

    async def settle_orphaned(self, principals: Sequence[str]) -> int:
        """Leased mode: dispatches a dead replica incarnation left in flight become unknown."""
        settled = 0
        for principal in principals:
            tenant = self._ledger.for_principal(principal)
            for dispatch in await self._db(TenantLeases(tenant).orphaned_dispatches):
                reason = (
                    f"the replica that sent it stopped with the call {dispatch.state.value}; "
                    "outcome unknown"
                )
                try:
                    await self._db(tenant.calls.mark_dispatch_unknown, dispatch.ref, reason)
                except InvalidTransition:
                    continue  # settled meanwhile (its result arrived, or another replica)
                settled += 1
        return settled

    async def watch_again(self, principal: str, task: TaskView) -> None:
        """Watch a recorded handle again (a replayed call) unless it is closed or watched
        already; leased first in leased mode."""
        if not task.is_open or self._scheduler().is_watching(task.ref):
            return
        lease = None
        replica = self._replica()
        if replica is not None:
            lease = await replica.adopt_task(principal, task.ref)
            if lease is None:
                return  # another replica claimed it in between: it polls it
        self._scheduler().watch(principal, task, due_ms=None, lease=lease)

    async def take_back_cancelled(self, principal: str, requested_by: str) -> ResumeReport:
        """Watch again every open handle not watched here whose last cancel was asked by
        ``requested_by`` (a host's policy for handles its host will never poll again), as a
        restart's resume does: a cancel never acknowledged is sent before the next poll."""
        tenant = self._ledger.for_principal(principal)
        scheduler = self._scheduler()
        tasks = await self._db(tenant.reads.list_tasks, open_only=True)
        asked = [
            t
            for t in tasks
            if t.cancel_requested_at_ms is not None and not scheduler.is_watching(t.ref)
        ]
        asked_by: dict[str, str] = {}
        for run_ref in sorted({t.run_ref for t in asked}):
            for event in await self._db(tenant.reads.events, run_ref):
                if isinstance(event, ev.TaskCancelRequested):
                    asked_by[event.task_ref] = event.requested_by  # the last one counts
        watched = cancels = 0
        for task in asked:
            if asked_by.get(task.ref) != requested_by:
                continue
            await self.watch_again(principal, task)
            if not scheduler.is_watching(task.ref):
                continue  # another replica holds it
            watched += 1
            if _cancel_unacknowledged(task):
                scheduler.mark_cancel_pending(task.ref)
                cancels += 1
        return ResumeReport(watched, 0, 0, cancels)

    async def poll_now(
        self,
        principal: str,
        task_ref: str,
        carried: HostPoll | None = None,
        *,
        due_ms: int | None = None,
        known: TaskView | None = None,
    ) -> tuple[TaskView, HostPoll]:
        """One ``tasks/get`` of a recorded handle now, for a host that schedules its polls
        itself: the handle leaves this process's scheduler (the next poll is the host's), and
        the poll starts from what the ledger knows, as a resumed watch does: input keys
        already seen (not surfaced again), answers recorded but not delivered (sent first:
        nobody else would) and a requested cancel (sent first, unless ``carried`` says one of
        the host's earlier polls had it acknowledged). ``carried``: what the host's previous
        poll of it returned (failures in a row, for the backoff and the unreachable report);
        ``due_ms``: when the host meant to send it (the poll lateness figures); ``known``:
        the handle as the host's previous poll of it returned it, read from the ledger after
        that poll (spares a read: a host polling a handle that does not change in a loop
        sends one ledger read per poll, not two). A closed handle is read, not polled."""
        carried = carried or HostPoll()
        tenant = self._ledger.for_principal(principal)
        scheduler = self._scheduler()
        scheduler.forget(task_ref)
        if known is not None and known.ref == task_ref:
            task = known
        else:
            task = await self._db(tenant.reads.get_task, task_ref)
        if not task.is_open:
            return task, replace(carried, backoff_ms=None, sent_ago_ms=None)
        watch = Watch(
            principal,
            task,
            failures=carried.failures,
            failing_since_ms=carried.failing_since_ms,
            unreachable_reported=carried.unreachable_reported,
        )
        watch.cancel_pending = _cancel_unacknowledged(task) and not carried.cancel_sent
        if task.status is TaskStatus.INPUT_REQUIRED:  # only then can inputs or answers wait
            digests = await self._db(tenant.reads.input_digests, [task_ref])
            watch.input_digests.update(digests.get(task_ref, {}))
            undelivered = await self._db(tenant.inputs.undelivered_answers)
            watch.undelivered_answers = any(a.task_ref == task_ref for a in undelivered)
        polled = await scheduler.poll_once(principal, task, watch, due_ms)
        failed, sent = watch.failures > 0, watch.sent_at_s
        return polled, HostPoll(
            failures=watch.failures,
            failing_since_ms=watch.failing_since_ms,
            unreachable_reported=watch.unreachable_reported,
            cancel_sent=carried.cancel_sent
            or (task.cancel_requested_at_ms is not None and not watch.cancel_pending),
            backoff_ms=watch.backoff_ms if failed else None,
            sent_ago_ms=None if sent is None else round((time.monotonic() - sent) * 1000),
        )


def _cancel_unacknowledged(task: TaskView) -> bool:
    """A cancel was asked for and no answer to it recorded: whoever resumes the handle sends
    it (once it is acknowledged, never again)."""
    return task.cancel_requested_at_ms is not None and task.cancel_acknowledged_at_ms is None


@dataclass(frozen=True, slots=True)
class HostPoll:
    """What a host that schedules its own polls carries from one poll of a handle to the next
    (the scheduler keeps the same in its watch): failed polls in a row and since when, whether
    the unreachable server was reported, whether a requested cancel was acknowledged (or
    refused: not resent), and, after a failed poll, the backoff to wait before the next."""

    failures: int = 0
    failing_since_ms: int | None = None
    unreachable_reported: bool = False
    cancel_sent: bool = False
    backoff_ms: int | None = None
    # How long before poll_now returned this poll's requests left (None: none left): the
    # host's next interval runs from then, so that no two polls are closer than it, whatever
    # the poll waited for before leaving.
    sent_ago_ms: int | None = None
