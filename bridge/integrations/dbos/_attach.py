"""The bridge this process's DBOS workflows call through.

DBOS steps are plain module functions that DBOS may re-run in any process of the application
(recovery after a crash): they cannot carry an open bridge as an argument, so each process
attaches its own, once, before ``DBOS.launch()``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bridge._config import SchedulerConfig
from bridge._errors import BridgeError
from bridge._facade import Bridge
from bridge._ledger.reads.views import TaskView
from bridge._mcp.polling.handle_resumption import HostPoll
from bridge._run import Run


@dataclass(frozen=True, slots=True)
class Attached:
    """This process's bridge, the principal its workflows act for, and how long one poll
    step may keep polling a task that does not change (see :func:`attach`)."""

    bridge: Bridge
    principal: str
    poll_window_s: float = 30.0

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
        requester = self.bridge._services.requester
        return await requester.poll_now(
            self.principal, task_ref, carried, due_ms=due_ms, known=known
        )

    def take(self, task_ref: str) -> None:
        """The handle leaves this process's poll scheduler: the workflow polls it."""
        self.bridge._services.requester.scheduler.forget(task_ref)

    async def cancel(self, task_ref: str, requested_by: str) -> bool:
        """``tasks/cancel`` (the intent recorded first; an acknowledgement recorded after, and
        never sent again); whether the server acknowledged it."""
        requester = self.bridge._services.requester
        return await requester.cancel_task(self.principal, task_ref, requested_by)

    async def give_back(self, task: TaskView) -> None:
        """The handle returns to this process's poll scheduler: no workflow polls it now."""
        await self.bridge._services.requester._resumption.watch_again(self.principal, task)

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


def attach(bridge: Bridge, principal: str, *, poll_window_s: float = 30.0) -> None:
    """Make ``bridge`` the one this process's workflows call through, for ``principal``.

    Open the bridge with ``recover_on_start=False``: DBOS recovery resumes the workflows, and
    each resumed workflow takes its own handles back one poll at a time (a bridge recovering
    on its own would poll them a second time, and settle other live workers' calls).

    ``poll_window_s``: how long one poll step goes on polling, at the server's interval, a
    task whose state does not change before it returns (a checkpoint, then a durable sleep);
    0 checkpoints every poll."""
    global _current
    if principal not in bridge.principals:
        raise BridgeError(f"principal {principal!r} is not in this bridge's scope")
    if poll_window_s < 0:
        raise BridgeError("poll_window_s is at least 0")
    _current = Attached(bridge, principal, poll_window_s)


def attached() -> Attached:
    """The attached bridge; :class:`~bridge.errors.BridgeError` when none is."""
    if _current is None:
        raise BridgeError(
            "no bridge attached in this process: call bridge.integrations.dbos.attach(bridge, "
            "principal) before DBOS.launch()"
        )
    return _current
