"""The bridge this process's DBOS workflows call through.

DBOS steps are plain module functions that DBOS may re-run in any process of the application
(recovery after a crash): they cannot carry an open bridge as an argument, so each process
attaches its own, once, before ``DBOS.launch()``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bridge._config import SchedulerConfig
from bridge._errors import BridgeError
from bridge._facade import Bridge, host_polls
from bridge._ledger.reads.views import TaskView
from bridge._mcp.polling.handle_resumption import HostPoll
from bridge._run import Run
from bridge._runtime.host_polls import HostPolls


@dataclass(frozen=True, slots=True)
class Attached:
    """This process's bridge, the principal its workflows act for, and how long one poll
    step may keep polling a task that does not change (see :func:`attach`)."""

    bridge: Bridge
    principal: str
    poll_window_s: float = 30.0
    _polls: HostPolls = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The package-internal door to the bridge's polls of this principal's handles.
        object.__setattr__(self, "_polls", host_polls(self.bridge, self.principal))

    def run(self, run_ref: str) -> Run:
        return self.bridge.run(self.principal, run_ref)

    async def poll(
        self,
        task_ref: str,
        carried: HostPoll,
        *,
        due_ms: int | None = None,
        known: TaskView | None = None,
    ) -> tuple[TaskView, HostPoll]:
        """One ``tasks/get`` of a handle the workflow holds (:meth:`Run.poll`, with what the
        workflow's previous poll carried: failures for the backoff, a cancel sent; ``known``:
        the task as the previous poll in the same step returned it, not read again)."""
        return await self._polls.poll(task_ref, carried, due_ms=due_ms, known=known)

    def take(self, task_ref: str) -> None:
        """The handle leaves this process's poll scheduler: the workflow polls it."""
        self._polls.take(task_ref)

    async def cancel(self, task_ref: str, requested_by: str) -> bool:
        """``tasks/cancel`` (the intent recorded first; an acknowledgement recorded after, and
        never sent again); whether the server acknowledged it."""
        return await self._polls.cancel(task_ref, requested_by)

    async def give_back(self, task: TaskView) -> None:
        """The handle returns to this process's poll scheduler: no workflow polls it now."""
        await self._polls.give_back(task)

    @property
    def pacing(self) -> SchedulerConfig:
        """The poll floor, default interval and optional ceiling the bridge was opened with."""
        return self.bridge.settings.scheduler or SchedulerConfig()

    def delay_ms(
        self, server_ms: int | None, backoff_ms: int | None, *, jitter: float = 0.0
    ) -> int:
        """How long to wait before the next poll: the server's interval, within the floor
        (and opt-in ceiling) the bridge was opened with, stretched by ``jitter`` (a draw in
        [0, 1) of the bridge's ``SchedulerConfig.jitter``: never shorter); after a failed
        poll, the scheduler's backoff, never shorter than that."""
        pacing = self.pacing
        wanted = pacing.default_interval_ms if server_ms is None else server_ms
        delay = max(wanted, pacing.floor_ms)
        if pacing.ceiling_ms is not None:
            delay = min(delay, pacing.ceiling_ms)
        delay += int(delay * jitter * pacing.jitter)
        return delay if backoff_ms is None else max(delay, backoff_ms)

    def next_delay_ms(self, server_ms: int | None, backoff_ms: int | None) -> int:
        """:meth:`delay_ms` with the jitter the bridge's own scheduler draws for each
        interval: workflows started together (their polls due in the same second) drift apart,
        as the scheduler's watches do, instead of polling in bursts for ever."""
        return self.delay_ms(server_ms, backoff_ms, jitter=random.random())


_current: Attached | None = None

# How a cancel the workflow-cancel policy asked for is recorded (``task.cancel_requested``
# ``requested_by``): DBOS resumes no cancelled workflow, so no workflow polls such a handle again.
WORKFLOW_CANCELLED = "policy:workflow_cancelled"


def attach(bridge: Bridge, principal: str, *, poll_window_s: float = 30.0) -> None:
    """Make ``bridge`` the one this process's workflows call through, for ``principal``.

    Open the bridge with ``recover_on_start=False``: DBOS recovery resumes the workflows, and
    each resumed workflow takes its own handles back one poll at a time (a bridge recovering
    on its own would poll them a second time, and settle other live workers' calls).

    ``poll_window_s``: how long one poll step goes on polling, at the server's interval, a
    task whose state does not change before it returns (a checkpoint, then a durable sleep);
    0 checkpoints every poll.

    Attaching an open bridge also takes back, in the background, the open handles whose
    workflow's cancel policy asked for ``tasks/cancel`` in a worker that died before the task
    ended: they are watched here, and a cancel the server never acknowledged is sent once
    (one it acknowledged, never again)."""
    global _current
    if principal not in bridge.principals:
        raise BridgeError(f"principal {principal!r} is not in this bridge's scope")
    if poll_window_s < 0:
        raise BridgeError("poll_window_s is at least 0")
    _current = Attached(bridge, principal, poll_window_s)
    _current._polls.take_back_cancelled_soon(WORKFLOW_CANCELLED)


def attached() -> Attached:
    """The attached bridge; :class:`~bridge.errors.BridgeError` when none is."""
    if _current is None:
        raise BridgeError(
            "no bridge attached in this process: call bridge.integrations.dbos.attach(bridge, "
            "principal) before DBOS.launch()"
        )
    return _current
