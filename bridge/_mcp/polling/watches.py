"""What the poll scheduler keeps about each watched handle, its settings, and the hooks it
calls (pure data and protocols: no I/O)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from bridge import events as ev
from bridge._config import SchedulerConfig
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import TaskView
from bridge._mcp.failures import Misbehaviour


class LeaseGuard(Protocol):
    """Whether this replica may act on the handles it leased (see
    :mod:`bridge._ledger.coordination.replica`)."""

    def can_act(self) -> bool: ...


class InputObserver(Protocol):
    """Input requests as polls see them
    (:class:`bridge._mcp.inputs.task_input_handlers.TaskInputs`)."""

    def recorded(
        self, principal: str, task: TaskView, requests: list[ev.TaskInputRequired]
    ) -> None: ...

    async def polled(self, principal: str, task: TaskView, lease: Membership | None) -> None: ...

    def forget(self, task_ref: str) -> None: ...


class AnswerCarrier(Protocol):
    """Carries recorded answers of some handles instead of ``tasks/update`` (2025-11-25: the
    server's own requests; :class:`bridge._mcp.inputs.legacy_held_result.LegacyInputs`)."""

    def carries(self, task: TaskView) -> bool: ...

    def answers_recorded(self, task_ref: str) -> None: ...


@dataclass(slots=True)
class Watch:
    principal: str
    view: TaskView
    input_digests: dict[str, str] = field(default_factory=dict)
    failures: int = 0
    failing_since_ms: int | None = None
    unreachable_reported: bool = False
    last_anomaly: str | None = None
    last_misbehaviour: Misbehaviour | None = None  # named once per kind until a good reply
    undelivered_answers: bool = False
    cancel_pending: bool = False
    # The replica incarnation this handle is leased to (leased polling), or None (single
    # process). Every write about the handle carries it, and is refused once it is stale.
    lease: Membership | None = None
    # Pushed observations (notifications/tasks) applied so far; a poll whose request left
    # before one of them was applied may carry older state, so its outcome is dropped.
    pushes: int = 0
    # One observation at a time; taken without a trip through the event loop when free (the
    # usual case: a push and a poll reply about the same handle rarely meet).
    observing: anyio.Lock = field(default_factory=lambda: anyio.Lock(fast_acquire=True))
    # An acknowledged listen stream names this handle: its changes are pushed. A poll sent
    # after the acknowledgement has seen every change before it; from then on the push
    # stream carries them, and polls are only the backstop.
    pushed: bool = False
    push_epoch: int = 0  # bumped when a stream stops naming it: a poll sent before is stale
    # A listen naming this handle awaits its acknowledgement: a poll that comes due meanwhile
    # waits for it (``held``), as the first poll after the acknowledgement has to be sent
    # anyway and sees every change before it. Explicit wake-ups (``asked``) are not held.
    listen_pending: bool = False
    held: bool = False
    asked: bool = False
    # When (time.monotonic) the last poll's requests left: a host that paces its own polls
    # (HandleResumption.poll_now) runs the next interval from it.
    sent_at_s: float | None = None
    # The delay the last failed poll backed off by (a host scheduling its own polls waits it).
    backoff_ms: int | None = None


@dataclass(slots=True)
class SchedulerStats:
    polls: int = 0
    # Polls that came due while a listen naming the handle awaited its acknowledgement, and
    # waited for it instead of being sent (the poll after the acknowledgement replaced them).
    held_for_listen: int = 0
    loops: int = 0  # passes of the scheduler loop (a test with an injected clock waits on it)
    writes: int = 0
    failures: int = 0
    leases_lost: int = 0  # handles dropped because another replica holds them now
    # Leased handles dropped at once because this replica's membership lapsed (a renewal came
    # too late under load): another replica may claim and poll them before their next due time.
    dropped_on_lapse: int = 0
    # (due_ms, lateness_ms, task_ref) per poll, only when keep_lateness is set (benchmarks)
    lateness: list[tuple[int, int, str]] = field(default_factory=list)
    keep_lateness: bool = False


@dataclass(frozen=True, slots=True)
class PollTiming:
    """When a watched handle is polled next (pure: the clock and the randomness come in)."""

    config: SchedulerConfig
    rng: random.Random

    def interval_for(self, server_ms: int | None, *, pushed: bool = False) -> int:
        """The delay before the next poll: the server's interval (at least the floor, and
        the push backstop while pushes arrive; at most the ceiling only if one is
        configured), stretched by jitter, never shortened."""
        config = self.config
        base = config.default_interval_ms if server_ms is None else server_ms
        bounded = max(base, config.floor_ms)
        if pushed and config.push_backstop_ms is not None:
            bounded = max(bounded, config.push_backstop_ms)
        if config.ceiling_ms is not None:
            bounded = min(bounded, config.ceiling_ms)
        return bounded + int(bounded * self.rng.random() * config.jitter)

    def next_due_ms(
        self,
        now_ms: int,
        server_ms: int | None,
        ttl_deadline_ms: int | None,
        *,
        pushed: bool = False,
    ) -> int:
        """When to poll next: after :meth:`interval_for`, or at the TTL deadline if that comes
        first (the backstop's one look: terminal by then, or lost)."""
        due = now_ms + self.interval_for(server_ms, pushed=pushed)
        if ttl_deadline_ms is not None and now_ms < ttl_deadline_ms < due:
            return ttl_deadline_ms
        return due


def ttl_deadline_ms(task: TaskView) -> int | None:
    # Measured from when this bridge recorded the handle (never earlier than the server's
    # createdAt), on the bridge's own clock, so clock skew cannot expire a handle early.
    if task.ttl_ms is None:
        return None
    return task.created_at_ms + task.ttl_ms
