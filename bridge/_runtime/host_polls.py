"""The door a host whose own durable engine schedules the polls of its handles goes through
(:mod:`bridge.integrations.dbos`): poll a handle now, take it out of the bridge's poll
scheduler, cancel it, hand it back, and take back what a dead worker left to cancel.

Package-internal: the integration gets one from :func:`bridge._facade.host_polls`, never by
reaching into the bridge's parts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from anyio.abc import TaskGroup

from bridge._ledger.reads.views import TaskView
from bridge._mcp.calls.requester import TaskRequester
from bridge._mcp.polling.handle_resumption import HostPoll, ResumeReport

logger = logging.getLogger(__name__)


class HostPolls:
    """One principal's handles, as a host engine polls them (see the module)."""

    def __init__(
        self,
        requester: TaskRequester,
        principal: str,
        task_group: Callable[[], TaskGroup | None],
    ) -> None:
        self._requester = requester
        self.principal = principal
        self._task_group = task_group

    async def poll(
        self,
        task_ref: str,
        carried: HostPoll,
        *,
        due_ms: int | None = None,
        known: TaskView | None = None,
    ) -> tuple[TaskView, HostPoll]:
        """One ``tasks/get`` now, recorded (see :meth:`HandleResumption.poll_now`)."""
        return await self._requester.poll_now(
            self.principal, task_ref, carried, due_ms=due_ms, known=known
        )

    def take(self, task_ref: str) -> None:
        """The handle leaves this process's poll scheduler: the host polls it."""
        self._requester.scheduler.forget(task_ref)

    async def cancel(self, task_ref: str, requested_by: str) -> bool:
        """``tasks/cancel``, recorded first as intent; whether the server acknowledged it."""
        return await self._requester.cancel_task(self.principal, task_ref, requested_by)

    async def give_back(self, task: TaskView) -> None:
        """The handle returns to this process's poll scheduler: the host polls it no more."""
        await self._requester.watch_again(self.principal, task)

    async def take_back_cancelled(self, requested_by: str) -> ResumeReport:
        """Watch here every open handle whose last cancel ``requested_by`` asked for (the
        host's policy, for handles its host will never poll again), resending a cancel the
        server never acknowledged; one it acknowledged is never sent again."""
        return await self._requester.take_back_cancelled(self.principal, requested_by)

    def take_back_cancelled_soon(self, requested_by: str) -> bool:
        """:meth:`take_back_cancelled` in the background of the open bridge (for a host that
        attaches from synchronous code); False when the bridge is not open."""
        group = self._task_group()
        if group is None:
            return False
        group.start_soon(self._take_back_logged, requested_by)
        return True

    async def _take_back_logged(self, requested_by: str) -> None:
        try:
            report = await self.take_back_cancelled(requested_by)
        except Exception:  # a background start-up sweep must not stop the bridge
            logger.exception("taking back the handles %s asked to cancel failed", requested_by)
            return
        if report.tasks_watched:
            logger.info(
                "took back %d handle(s) %s asked to cancel; %d cancel(s) to resend",
                report.tasks_watched,
                requested_by,
                report.cancels_to_resend,
            )
