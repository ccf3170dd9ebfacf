"""The stuck-input deadline: a task left ``input_required`` with an unanswered request for
longer than the input policy allows is reported once (``task.input_stuck``), then optionally
cancelled (``tasks/cancel``, requested by ``policy:input_stuck``).

Two measures, either one enough: *polls* — consecutive polls of this process that saw the task
``input_required`` with an unanswered request (the C# SDK's requester gives up after 60) — and
*time* since the oldest unanswered request was first recorded (the ledger's clock, so it
survives a restart). Each request is reported at most once (``stuck_at_ms`` in the ledger).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from bridge._policies import InputPolicy, OnStuckInput

# (principal, task_ref, requested_by) -> whether the server acknowledged the cancel
CancelTask = Callable[[str, str, str], Awaitable[bool]]
STUCK_CANCEL_REQUESTER = "policy:input_stuck"


class StuckInputs:
    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        policy: InputPolicy,
        clock: Callable[[], int],
        cancel: CancelTask,
    ) -> None:
        self._ledger = ledger
        self._db = db
        self._policy = policy
        self._clock = clock
        self._cancel = cancel
        self._polls: dict[str, int] = {}  # task_ref -> polls seen stuck-eligible in a row

    async def polled(self, principal: str, task: TaskView, lease: Membership | None) -> None:
        """After each poll of a watched task: count it, and act once the deadline passed."""
        policy = self._policy
        if not policy.watches_stuck:
            return
        if task.status is not TaskStatus.INPUT_REQUIRED or not task.is_open:
            self._polls.pop(task.ref, None)
            return
        tenant = self._ledger.for_principal(principal)
        waiting = [
            r
            for r in await self._db(tenant.reads.input_requests, task.ref, pending_only=True)
            if r.stuck_at_ms is None
        ]
        if not waiting:
            self._polls.pop(task.ref, None)
            return
        polls = self._polls[task.ref] = self._polls.get(task.ref, 0) + 1
        waited_ms = self._clock() - min(r.first_seen_ms for r in waiting)
        past_polls = policy.stuck_after_polls is not None and polls >= policy.stuck_after_polls
        past_time = policy.stuck_after_ms is not None and waited_ms >= policy.stuck_after_ms
        if not (past_polls or past_time):
            return
        self._polls.pop(task.ref, None)
        cancel = policy.on_stuck is OnStuckInput.CANCEL
        reported = await self._db(
            tenant.inputs.record_input_stuck,
            task.ref,
            [r.ref for r in waiting],
            polls=polls,
            waited_ms=waited_ms,
            cancel=cancel,
            lease=lease,
        )
        if reported and cancel:
            await self._cancel(principal, task.ref, STUCK_CANCEL_REQUESTER)

    def forget(self, task_ref: str) -> None:
        self._polls.pop(task_ref, None)
