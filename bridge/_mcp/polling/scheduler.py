"""One poll scheduler per process, watching every open task handle.

A single :class:`DueQueue` holds every handle's next due time; one loop pops what is due (oldest
first) and runs each ``tasks/get`` as a short-lived task, bounded overall and per server. Each
task's latest ``pollIntervalMs`` is honoured exactly: a task is never polled sooner than its
server asked (jitter only lengthens the wait), above a floor (a server answering 0 cannot make
it spin) and, only if the host opts in, below a ceiling; with exponential backoff while its
server fails. Explicit wake-ups (:meth:`PollScheduler.poll_soon`: an answer to deliver, a
cancel to send, the host asking) poll at once, whatever the interval; so does the TTL
backstop's one look at the deadline. While an acknowledged ``subscriptions/listen`` stream
names a handle (:mod:`bridge._mcp.polling.push`), its states arrive pushed and polling drops to a
backstop (:attr:`SchedulerConfig.push_backstop_ms`): the spec lets a subscribed client stop
polling, and the backstop covers a server that goes quiet. Only observed *changes* are written
to the ledger (with their events); the terminal result is committed before the handle leaves
the queue.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable

import anyio
from anyio.abc import TaskStatus as AnyioTaskStatus

from bridge import events as ev
from bridge._config import SchedulerConfig
from bridge._errors import LeaseLost, LedgerUnavailable
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import TaskObservation, TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, wall_clock_ms
from bridge._lifecycle import LostReason, TaskStatus
from bridge._mcp.failures import Failure, FailureKind, Misbehaviour, classify
from bridge._mcp.polling.due_queue import DueQueue
from bridge._mcp.polling.misbehaving import name_misbehaviour
from bridge._mcp.polling.status_reply import (
    input_requests,
    parse_status,
    reply_is_unchanged,
    request_digest,
)
from bridge._mcp.polling.watches import (
    AnswerCarrier,
    InputObserver,
    LeaseGuard,
    PollTiming,
    SchedulerStats,
    Watch,
    ttl_deadline_ms,
)
from bridge._mcp.servers import ServerConnection, ServerPool
from bridge._mcp.task_requests import deliver_answers, fetch_task, send_cancel
from bridge._mcp.wire.shapes import INTERNAL_ERROR, INVALID_PARAMS, DetailedTask
from bridge._telemetry.metrics import record_poll

log = logging.getLogger(__name__)


class PollScheduler:
    def __init__(
        self,
        ledger: Ledger,
        pool: ServerPool,
        db: LedgerRunner,
        config: SchedulerConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        rng: random.Random | None = None,
    ) -> None:
        self._ledger = ledger
        self._pool = pool
        self._db = db
        self.config = config or SchedulerConfig()
        self._ledger_fault_logged = False  # a ledger fault is logged once, not per poll
        self._clock = clock
        self._rng = rng or random.Random()
        self.timing = PollTiming(self.config, self._rng)
        self._queue = DueQueue()
        self._watched: dict[str, Watch] = {}
        # Polls under way per server, at most per_server_concurrency (a slot free now is taken
        # without a trip through the event loop).
        self._server_slots: dict[str, anyio.Semaphore] = {}
        self._in_flight = 0
        self._wake = anyio.Event()
        self.stats = SchedulerStats()
        # Called with (principal, task_ref) when a watched handle closes (terminal or lost).
        self.on_closed: Callable[[str, str], None] | None = None
        # Set in leased mode: leased handles are polled only while it says the lease holds.
        self.lease_guard: LeaseGuard | None = None
        # Told where input requests are first recorded, and after every poll.
        self.inputs: InputObserver | None = None
        self.answer_carrier: AnswerCarrier | None = None
        self._held = False
        # Called with a server endpoint whenever the set of watched handles there changes
        # (the push listener re-subscribes; see bridge._mcp.polling.push).
        self.on_watch_changed: Callable[[str], None] | None = None

    # -- what callers use ------------------------------------------------------------------
    def watch(
        self,
        principal: str,
        task: TaskView,
        *,
        due_ms: int | None = None,
        lease: Membership | None = None,
    ) -> None:
        """Start (or keep) watching an open task; first poll at ``due_ms`` (default: now).

        ``lease``: the replica incarnation the task is leased to (leased polling).
        """
        if not task.is_open:
            return
        current = self._watched.get(task.ref)
        if current is None:
            current = Watch(principal, task, lease=lease)
            self._watched[task.ref] = current
            self._watch_changed(task.server_endpoint)
        else:
            current.view = task
            current.lease = lease
        self._queue.schedule(task.ref, self._clock() if due_ms is None else due_ms)
        self._wake.set()

    def seed_input_digests(self, task_ref: str, digests: dict[str, str]) -> None:
        """Input keys already on record, so a restart does not treat them as new."""
        watch = self._watched.get(task_ref)
        if watch is not None:
            watch.input_digests.update(digests)

    def poll_soon(self, task_ref: str) -> None:
        watch = self._watched.get(task_ref)
        if watch is not None:
            watch.asked = True  # not held for a pending listen
            self._queue.schedule(task_ref, self._clock())
            self._wake.set()

    def wake(self) -> None:
        """Look at the clock again now (an injected clock moved); polls only what is due."""
        self._wake.set()

    def due_ms(self, task_ref: str) -> int | None:
        """When a watched task is next due (``None``: not queued, e.g. being polled)."""
        return self._queue.due(task_ref)

    def mark_undelivered_answers(self, task_ref: str) -> None:
        watch = self._watched.get(task_ref)
        if watch is not None:
            watch.undelivered_answers = True
            self.poll_soon(task_ref)

    def mark_cancel_pending(self, task_ref: str) -> None:
        watch = self._watched.get(task_ref)
        if watch is not None:
            watch.cancel_pending = True
            self.poll_soon(task_ref)

    async def poll_once(
        self, principal: str, task: TaskView, watch: Watch | None = None, due_ms: int | None = None
    ) -> TaskView:
        """Poll one handle now, watched or not (an operator re-check of a closed handle;
        ``watch``: an unwatched handle's state, as :mod:`.handle_resumption` seeds it;
        ``due_ms``: when the caller meant it to be sent, for the lateness figures).

        A terminal handle re-checked this way can only confirm its status or be recorded as a
        regression anomaly: nothing overwrites a recorded terminal status.
        """
        watch = watch or self._watched.get(task.ref) or Watch(principal, task)
        await self._poll(watch, due_ms)
        # Through the ledger runner: a read here must not block the event loop's other polls.
        return await self._db(self._ledger.for_principal(principal).reads.get_task, task.ref)

    def forget(self, task_ref: str) -> None:
        watch = self._watched.pop(task_ref, None)
        self._queue.discard(task_ref)
        if self.inputs is not None:
            self.inputs.forget(task_ref)
        if watch is not None:
            self._watch_changed(watch.view.server_endpoint)

    def watched_on(self, endpoint: str) -> list[TaskView]:
        """The handles watched on one server, oldest first (what a push listener asks for)."""
        views = [w.view for w in self._watched.values() if w.view.server_endpoint == endpoint]
        return sorted(views, key=lambda view: view.created_at_ms)

    def listen_pending(self, task_refs: Iterable[str]) -> None:
        """A listen naming these handles was sent: until :meth:`listen_settled`, a poll of
        theirs that comes due waits (the poll sent after the acknowledgement replaces it)."""
        for ref in task_refs:
            watch = self._watched.get(ref)
            if watch is not None:
                watch.listen_pending = True

    def listen_settled(self, task_refs: Iterable[str]) -> None:
        """The listen naming these handles was acknowledged, refused, or given up on (at most
        ``PushConfig.ack_timeout_s``): a poll held meanwhile is sent now. Called after
        :meth:`push_acknowledged`, so that poll counts as the one after the acknowledgement."""
        now = self._clock()
        for ref in task_refs:
            watch = self._watched.get(ref)
            if watch is None:
                continue
            watch.listen_pending = False
            if watch.held:
                watch.held = False
                self._queue.schedule(ref, now)
                self._wake.set()

    def push_acknowledged(self, task_refs: Iterable[str]) -> None:
        """An acknowledged listen stream names these handles: after their next poll (which
        sees any change made before the acknowledgement), they are polled only at the
        backstop."""
        for ref in task_refs:
            watch = self._watched.get(ref)
            if watch is not None:
                watch.pushed = True

    def push_ended(self, task_refs: Iterable[str]) -> None:
        """No stream names these handles any more (closed, or lost): back to the server's
        interval, due no later than one interval from now (a change pushed while no stream was
        up is seen at that poll)."""
        now = self._clock()
        for ref in task_refs:
            watch = self._watched.get(ref)
            if watch is None or not watch.pushed:
                continue
            watch.pushed = False
            watch.push_epoch += 1
            due = self._queue.due(ref)
            soon = self.timing.next_due_ms(
                now, watch.view.poll_interval_ms, ttl_deadline_ms(watch.view)
            )
            if due is not None and soon < due:
                self._queue.schedule(ref, soon)
                self._wake.set()

    async def observe_pushed(self, task_ref: str, reply: DetailedTask) -> bool:
        """Feed a pushed task state (``notifications/tasks``) into the poll-reply path:
        the same validation, write-ahead and events. ``False`` if the handle is not watched."""
        watch = self._watched.get(task_ref)
        if watch is None:
            return False
        try:
            async with watch.observing:
                watch.pushes += 1
                await self._on_reply(watch, reply, pushed=watch.pushed)
        except LeaseLost:  # another replica holds the handle now: its observation wins
            self.stats.leases_lost += 1
            if self._watched.get(task_ref) is watch:
                self.forget(task_ref)
            return False
        return True

    async def reject_pushed(self, task_ref: str, detail: str) -> bool:
        """A malformed push about a watched handle: one anomaly per distinct problem, and an
        early poll (``tasks/get`` tells the truth). ``False`` if the handle is not watched."""
        watch = self._watched.get(task_ref)
        if watch is None:
            return False
        if watch.last_anomaly != detail:
            watch.last_anomaly = detail
            tenant = self._ledger.for_principal(watch.principal)
            await self._db(
                tenant.runs.record_anomaly,
                watch.view.run_ref,
                "malformed_notification",
                f"notifications/tasks: {detail}",
                task_ref=task_ref,
                lease=watch.lease,
            )
        self.poll_soon(task_ref)
        return True

    def _watch_changed(self, endpoint: str) -> None:
        if self.on_watch_changed is not None:
            self.on_watch_changed(endpoint)

    def forget_leased(self) -> int:
        """Drop every leased handle (this replica's membership lapsed). Returns how many."""
        leased = [ref for ref, watch in self._watched.items() if watch.lease is not None]
        for ref in leased:
            self.forget(ref)
        self.stats.dropped_on_lapse += len(leased)
        return len(leased)

    def hold(self) -> None:
        """Start no poll until :meth:`release` (while a restart hands over thousands of
        handles, taking them all back comes first; they are then polled oldest due first)."""
        self._held = True

    def release(self) -> None:
        self._held = False
        self._wake.set()

    def is_watching(self, task_ref: str) -> bool:
        return task_ref in self._watched

    @property
    def watched_count(self) -> int:
        return len(self._watched)

    @property
    def in_flight(self) -> int:
        """Polls started and not finished yet (still running after :meth:`hold`)."""
        return self._in_flight

    # -- the loop ------------------------------------------------------------------------------
    async def run(self, *, task_status: AnyioTaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as polls:
            task_status.started()
            while True:
                self.stats.loops += 1
                now = self._clock()
                free = 0 if self._held else self.config.max_in_flight - self._in_flight
                if free > 0:
                    for task_ref, due in self._queue.pop_due(now, free):
                        watch = self._watched.get(task_ref)
                        if watch is None:
                            continue
                        if watch.listen_pending and not self._urgent(watch):
                            watch.held = True  # sent once the listen is settled
                            self.stats.held_for_listen += 1
                            continue
                        watch.asked = False
                        self._in_flight += 1
                        polls.start_soon(self._poll_guarded, watch, due)
                await self._sleep_until_next(free > 0)

    @staticmethod
    def _urgent(watch: Watch) -> bool:
        """A poll that must not wait for a pending listen: asked for, or carrying a cancel or
        answers to deliver."""
        return watch.asked or watch.cancel_pending or watch.undelivered_answers

    async def _sleep_until_next(self, has_capacity: bool) -> None:
        next_due = self._queue.next_due() if has_capacity else None
        delay = 3600.0 if next_due is None else max(0, next_due - self._clock()) / 1000
        if delay > 0:
            with anyio.move_on_after(delay):
                await self._wake.wait()
        else:
            await anyio.lowlevel.checkpoint()
        self._wake = anyio.Event()

    async def _poll_guarded(self, watch: Watch, due_ms: int) -> None:
        try:
            await self._poll(watch, due_ms)
        except LeaseLost:
            # Another replica holds the handle now: its observation wins, ours is dropped.
            self.stats.leases_lost += 1
            if self._watched.get(watch.view.ref) is watch:
                self.forget(watch.view.ref)
        except LedgerUnavailable as exc:
            # The ledger's fault, not the poll's: said once as what it is, retried later.
            if not self._ledger_fault_logged:
                log.error("polls cannot record what they see: %s", exc)
                self._ledger_fault_logged = True
            self._backoff(watch)
        except Exception:  # a bug must not stop the scheduler; the handle is retried later
            log.exception("poll of %s failed unexpectedly", watch.view.ref)
            self._backoff(watch)
        finally:
            self._in_flight -= 1
            self._wake.set()

    # -- one poll --------------------------------------------------------------------------------
    async def _poll(self, watch: Watch, due_ms: int | None = None) -> None:
        task = watch.view
        config = self._pool.config_for_endpoint(task.server_endpoint)
        if config is None:
            await self._lose(watch, LostReason.SERVER_GONE, "no enabled server has this endpoint")
            return
        connection = self._pool.connection(config.name)
        slots = self._server_slots.get(config.name)
        if slots is None:
            slots = anyio.Semaphore(self.config.per_server_concurrency, fast_acquire=True)
            self._server_slots[config.name] = slots
        async with slots:
            guard = self.lease_guard
            if watch.lease is not None and guard is not None and not guard.can_act():
                # Not sure the lease still holds (renewal pending): polling now could overlap
                # with the replica that takes it over. Try again shortly.
                self._queue.schedule(task.ref, self._clock() + self.config.lease_wait_ms)
                return
            self.stats.polls += 1
            watch.sent_at_s = time.monotonic()
            record_poll(None if due_ms is None else self._clock() - due_ms)
            if self.stats.keep_lateness and due_ms is not None:
                # Measured when the request is about to leave, after any queueing here.
                self.stats.lateness.append((due_ms, self._clock() - due_ms, task.ref))
            try:
                if watch.cancel_pending:
                    if await self._refusable(watch, "tasks/cancel", send_cancel(connection, task)):
                        await self._cancel_acknowledged(watch)
                    watch.cancel_pending = False
                if watch.undelivered_answers:
                    await self._deliver_answers(watch, connection)
                pushes, pushed, epoch = watch.pushes, watch.pushed, watch.push_epoch
                reply = await fetch_task(connection, task)
            except Exception as exc:
                failure = classify(exc)
                if failure is None:
                    raise
                await self._on_failure(watch, failure)
                return
        async with watch.observing:
            if watch.pushes != pushes:
                return  # a push landed meanwhile (and rescheduled the handle): it supersedes this
            # Sent after the acknowledgement, and no stream dropped it since (push_ended bumps
            # the epoch; after a merge the handle was dropped and named again, and the poll
            # that counts is one sent after that): pushes carry the rest.
            covered = pushed and epoch == watch.push_epoch
            await self._on_reply(watch, reply, pushed=covered)

    async def _deliver_answers(self, watch: Watch, connection: ServerConnection) -> None:
        carrier = self.answer_carrier
        if carrier is not None and carrier.carries(watch.view):
            carrier.answers_recorded(watch.view.ref)  # kept until the server has them
            watch.undelivered_answers = False
            return
        inputs = self._ledger.for_principal(watch.principal).inputs
        answers = await self._db(inputs.undelivered_answers)
        pending = [a for a in answers if a.task_ref == watch.view.ref]
        if pending:
            update = deliver_answers(connection, watch.view, {a.key: a.answer for a in pending})
            if await self._refusable(watch, "tasks/update", update):
                for answer in pending:
                    await self._db(inputs.mark_answer_delivered, watch.view.ref, answer.ref)
        watch.undelivered_answers = False

    async def _cancel_acknowledged(self, watch: Watch) -> None:
        """Recorded before anything else happens: a process that resumes the handle after this
        one died does not send the cancel again."""
        tasks = self._ledger.for_principal(watch.principal).tasks
        await self._db(tasks.record_cancel_acknowledged, watch.view.ref, lease=watch.lease)

    async def _refusable(self, watch: Watch, method: str, request: Awaitable[None]) -> bool:
        """Send a resent ``tasks/update|cancel``; ``False`` if the server refused it.

        A refusal (any JSON-RPC error but -32603) is reported once as an anomaly and not resent;
        even -32602 does not lose the task here: the ``tasks/get`` that follows decides that.
        Transport trouble propagates (the handle backs off and it is resent later).
        """
        try:
            await request
        except Exception as exc:
            failure = classify(exc)
            if failure is None or failure.kind is not FailureKind.RPC_ERROR:
                raise
            if failure.code == INTERNAL_ERROR:
                raise
            tenant = self._ledger.for_principal(watch.principal)
            await self._db(
                tenant.runs.record_anomaly,
                watch.view.run_ref,
                f"{method.removeprefix('tasks/')}_refused",
                f"{method} answered {failure.code}: {failure.detail[:200]}",
                task_ref=watch.view.ref,
                lease=watch.lease,
            )
            return False
        return True

    async def _on_failure(self, watch: Watch, failure: Failure) -> None:
        now = self._clock()
        self.stats.failures += 1
        if failure.kind is FailureKind.RPC_ERROR and failure.code == INVALID_PARAMS:
            await self._lose(watch, LostReason.NOT_FOUND, "server answered -32602 (unknown task)")
            return
        if await self._expire_if_past_ttl(watch, now):
            return
        tenant = self._ledger.for_principal(watch.principal)
        if failure.misbehaviour is not None:  # reachable, answering badly: named by kind
            await name_misbehaviour(self._db, tenant, watch, failure)
        elif failure.kind in (FailureKind.NO_ANSWER, FailureKind.UNREACHABLE):
            watch.failing_since_ms = watch.failing_since_ms or now
            failing_for = now - watch.failing_since_ms
            if failing_for >= self.config.unreachable_grace_ms and not watch.unreachable_reported:
                watch.unreachable_reported = True
                await self._db(
                    tenant.tasks.record_server_unreachable,
                    watch.view.ref,
                    watch.failing_since_ms,
                    failure.detail,
                    lease=watch.lease,
                )
        elif watch.last_anomaly != failure.detail:
            watch.last_anomaly = failure.detail  # report each distinct bad reply once
            await self._db(
                tenant.runs.record_anomaly,
                watch.view.run_ref,
                "malformed_reply" if failure.kind is FailureKind.MALFORMED else "poll_error",
                f"tasks/get: {failure.detail}",
                task_ref=watch.view.ref,
                lease=watch.lease,
            )
        self._backoff(watch, at_least_ms=failure.retry_after_ms)

    async def _on_reply(self, watch: Watch, reply: DetailedTask, *, pushed: bool = False) -> None:
        task = watch.view
        now = self._clock()
        status = parse_status(reply.status)
        problem = None
        misbehaviour = None
        if reply.task_id != task.task_id:
            problem = "tasks/get answered for a different task id"
            misbehaviour = Misbehaviour.WRONG_TASK
        elif status is None:
            problem = f"tasks/get reported an unknown status {reply.status[:40]!r}"
        elif reply.result_type not in (None, "complete"):
            # A task body under a resultType no spec defines: not a state to record.
            problem = f"tasks/get answered with an unknown resultType {reply.result_type[:40]!r}"
        if problem is not None:
            await self._on_failure(
                watch, Failure(FailureKind.MALFORMED, problem, misbehaviour=misbehaviour)
            )
            return
        assert status is not None
        watch.failures, watch.failing_since_ms, watch.unreachable_reported = 0, None, False
        watch.last_misbehaviour = None
        next_due = self.timing.next_due_ms(
            now,
            reply.poll_interval_ms or task.poll_interval_ms,
            ttl_deadline_ms(task),
            pushed=pushed,
        )
        requests = input_requests(reply) if status is TaskStatus.INPUT_REQUIRED else None
        if reply_is_unchanged(watch.view, watch.input_digests, reply, status, requests):
            self._queue.schedule(task.ref, next_due)
        else:
            tasks = self._ledger.for_principal(watch.principal).tasks
            observation = TaskObservation(
                status=status,
                status_message=reply.status_message,
                server_updated_at=reply.last_updated_at,
                poll_interval_ms=reply.poll_interval_ms,
                ttl_ms=reply.ttl_ms,
                result=reply.result,
                error=reply.error,
                input_requests=requests,
                next_poll_due_ms=next_due,
            )
            outcome = await self._db(tasks.observe_task, task.ref, observation, lease=watch.lease)
            self.stats.writes += 1
            watch.view = outcome.task
            for key, request in (requests or {}).items():
                watch.input_digests.setdefault(key, request_digest(request))
            recorded = [e for e in outcome.events if isinstance(e, ev.TaskInputRequired)]
            if recorded and self.inputs is not None:
                self.inputs.recorded(watch.principal, outcome.task, recorded)
            if not outcome.task.is_open:
                self.forget(task.ref)
                self._closed(watch)
                return
            self._queue.schedule(task.ref, next_due)
        if self.inputs is not None:
            await self.inputs.polled(watch.principal, watch.view, watch.lease)
        await self._expire_if_past_ttl(watch, now)

    async def _expire_if_past_ttl(self, watch: Watch, now: int) -> bool:
        deadline = ttl_deadline_ms(watch.view)
        if deadline is None or now < deadline or not watch.view.is_open:
            return False
        await self._lose(watch, LostReason.TTL_EXPIRED, "createdAt + ttlMs passed, not terminal")
        return True

    async def _lose(self, watch: Watch, reason: LostReason, detail: str) -> None:
        tasks = self._ledger.for_principal(watch.principal).tasks
        await self._db(tasks.mark_task_lost, watch.view.ref, reason, detail, lease=watch.lease)
        self.forget(watch.view.ref)
        self._closed(watch)

    def _closed(self, watch: Watch) -> None:
        if self.on_closed is not None:
            try:
                self.on_closed(watch.principal, watch.view.ref)
            except Exception:  # telemetry must never break polling
                log.exception("closing hook failed for %s", watch.view.ref)

    # -- timing ---------------------------------------------------------------------------
    def _backoff(self, watch: Watch, *, at_least_ms: int | None = None) -> None:
        """Retry later: exponential backoff, or longer when the server asked (Retry-After,
        already capped by the transport at ``RETRY_AFTER_CAP_MS``)."""
        watch.failures += 1
        delay = min(
            self.config.backoff_base_ms * 2 ** min(watch.failures - 1, 16),
            self.config.backoff_max_ms,
        )
        delay = int(delay * (1 + self._rng.random() * self.config.jitter))
        if at_least_ms is not None:
            delay = max(delay, at_least_ms)
        watch.backoff_ms = delay
        if watch.view.ref in self._watched:
            self._queue.schedule(watch.view.ref, self._clock() + delay)
