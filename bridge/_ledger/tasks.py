"""The inner-tasks aggregate: observations through the task state machine, terminal
outcomes, lost verdicts, cancel intents and detaching."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import update

from bridge import events as ev
from bridge._ledger._base import OPEN_TASK, TASKS, Tx
from bridge._ledger.fencing import Membership, check_lease
from bridge._ledger.inputs import InputWrites
from bridge._ledger.outcome import bound_json
from bridge._ledger.reads.queries import TenantQueries, WriteScope
from bridge._ledger.reads.views import TaskObservation, TaskView
from bridge._lifecycle import (
    Change,
    Decision,
    LostReason,
    TaskStatus,
    decide_task,
    may_mark_lost,
)
from bridge._redaction import scrub_task_id


@dataclass(frozen=True, slots=True)
class ObservationOutcome:
    """What applying one task observation did."""

    decision: Decision
    task: TaskView
    events: tuple[ev.BridgeEvent, ...] = field(default=())

    @property
    def new_input_refs(self) -> tuple[str, ...]:
        return tuple(e.input_ref for e in self.events if isinstance(e, ev.TaskInputRequired))


class TaskWrites(WriteScope):
    """Writes of inner tasks; a task's input requests are written by the inputs beside it."""

    def __init__(self, reads: TenantQueries, inputs: InputWrites) -> None:
        super().__init__(reads)
        self._inputs = inputs

    def observe_task(
        self, task_ref: str, observation: TaskObservation, *, lease: Membership | None = None
    ) -> ObservationOutcome:
        """Apply one observation of a task through the state machine, with its events.

        With ``lease`` (leased polling), the write is refused with ``LeaseLost`` unless this
        replica incarnation still holds the task.
        """
        appended: list[ev.BridgeEvent] = []
        # Every task changes status a few times: its observation runs precompiled in a
        # transaction of the driver session, but one with input requests to record (Core
        # statements) opens its transaction through Core.
        records_inputs = observation.status is TaskStatus.INPUT_REQUIRED and bool(
            observation.input_requests
        )
        with self._write() if records_inputs else self._ledger._driver_write() as tx:
            row = self._locked_row(tx, TASKS, task_ref, "task")
            check_lease(row, lease, "task")
            current = TaskStatus(row.status)
            observed = observation.status
            decision = decide_task(current, observed, lost=row.lost_reason is not None)

            if decision.is_anomaly:
                appended.append(
                    self._append(
                        tx,
                        row.run_ref,
                        ev.Anomaly(
                            kind="task_status_regression", detail=decision.reason, task_ref=task_ref
                        ),
                    )
                )
            else:
                values = self._observation_values(row, observation)
                if decision.records_status:
                    values["status"] = observed.value
                    # The server's message describes the status it came with: a new status
                    # without one leaves none, not the previous status's (stale) text.
                    values.setdefault("status_message", None)
                    appended.append(
                        self._append_task_event(
                            tx,
                            row,
                            ev.TaskStatusChanged,
                            previous=current,
                            status=observed,
                            status_message=observation.status_message,
                        )
                    )
                if observed.is_terminal and row.terminal_at_ms is None:
                    appended.extend(self._store_terminal(tx, row, observation, decision, values))
                elif observed is TaskStatus.INPUT_REQUIRED and observation.input_requests:
                    appended.extend(
                        self._inputs._record_input_requests(tx, row, observation.input_requests)
                    )
                self._update_row(tx, TASKS, task_ref, **values)
        return ObservationOutcome(decision, self._reads.get_task(task_ref), tuple(appended))

    def _observation_values(self, row: Any, observation: TaskObservation) -> dict[str, Any]:
        values: dict[str, Any] = {"updated_at_ms": self.now}
        if observation.status_message is not None:
            values["status_message"] = scrub_task_id(
                observation.status_message, row.task_id, row.ref
            )
        if observation.server_updated_at is not None:
            values["server_updated_at"] = observation.server_updated_at
        if observation.poll_interval_ms is not None:
            values["poll_interval_ms"] = observation.poll_interval_ms
        if observation.ttl_ms is not None:
            values["ttl_ms"] = observation.ttl_ms
        if row.terminal_at_ms is None and row.lost_reason is None and row.detached_at_ms is None:
            values["next_poll_due_ms"] = observation.next_poll_due_ms
        return values

    def _store_terminal(
        self,
        tx: Tx,
        row: Any,
        observation: TaskObservation,
        decision: Decision,
        values: dict[str, Any],
    ) -> list[ev.BridgeEvent]:
        """Commit the terminal outcome; only then does the handle stop being polled."""
        appended: list[ev.BridgeEvent] = []
        status = observation.status
        result = error = None
        truncated = False
        size: int | None = None
        outcome = {TaskStatus.COMPLETED: observation.result, TaskStatus.FAILED: observation.error}
        if outcome.get(status) is not None:
            bounded = bound_json(outcome[status], self._ledger.max_outcome_bytes)
            # Server text may quote the raw task id: stored and shown as the task's reference.
            text = scrub_task_id(bounded.text, row.task_id, row.ref)
            column = "result_json" if status is TaskStatus.COMPLETED else "error_json"
            values[column], truncated, size = text, bounded.truncated, bounded.original_bytes
            if status is TaskStatus.COMPLETED:
                result = json.loads(text)
            else:
                error = json.loads(text)
        elif status is not TaskStatus.CANCELLED:
            missing = "result" if status is TaskStatus.COMPLETED else "error"
            appended.append(
                self._append(
                    tx,
                    row.run_ref,
                    ev.Anomaly(
                        kind="malformed_reply",
                        detail=f"{status.value} task reported without its {missing}",
                        task_ref=row.ref,
                    ),
                    raw_task_id=row.task_id,
                )
            )
        # (a task created terminal but lost before its outcome arrived is no status change)
        superseded = decision.change is Change.SUPERSEDE_LOST or row.lost_reason is not None
        values.update(
            outcome_truncated=truncated,
            outcome_bytes=size,
            terminal_at_ms=self.now,
            next_poll_due_ms=None,
        )
        if superseded:
            values.update(lost_reason=None, lost_detail=None)
        appended.append(
            self._append_task_event(
                tx,
                row,
                ev.TaskTerminal,
                status=status,
                superseded_lost=superseded,
                result=result,
                error=error,
                truncated=truncated,
            )
        )
        return appended

    def mark_task_lost(
        self,
        task_ref: str,
        reason: LostReason,
        detail: str = "",
        *,
        next_poll_due_ms: int | None = None,
        lease: Membership | None = None,
    ) -> bool:
        """Give up on a handle with a reason. No-op on an already-lost task or one whose
        terminal outcome is stored (a task created terminal without its outcome can be lost).

        ``next_poll_due_ms`` keeps a low-rate look-out for a late terminal status (which would
        supersede the verdict); by default a lost handle is no longer polled.
        """
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            check_lease(row, lease, "task")
            stored = row.terminal_at_ms is not None
            if not may_mark_lost(
                TaskStatus(row.status), row.lost_reason is not None, outcome_stored=stored
            ):
                return False
            self._update_row(
                tx,
                TASKS,
                task_ref,
                lost_reason=reason.value,
                lost_detail=detail,
                next_poll_due_ms=next_poll_due_ms,
                updated_at_ms=self.now,
            )
            self._append_task_event(tx, row, ev.TaskLost, reason=reason, detail=detail)
            self._inputs._close_inputs_of_lost_task(tx, row)
        return True

    def record_cancel_requested(self, task_ref: str, requested_by: str) -> bool:
        """Record the intent to cancel (before ``tasks/cancel``). An ack never proves a stop."""
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            if row.terminal_at_ms is not None:
                return False
            if row.cancel_requested_at_ms is None:
                now = self.now
                self._update_row(tx, TASKS, task_ref, cancel_requested_at_ms=now, updated_at_ms=now)
            self._append_task_event(tx, row, ev.TaskCancelRequested, requested_by=requested_by)
        return True

    def record_cancel_acknowledged(self, task_ref: str, *, lease: Membership | None = None) -> None:
        """The server answered ``tasks/cancel`` (intent taken, not a stop): whoever resumes the
        handle from now on does not send it again. The first acknowledgement is kept."""
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            check_lease(row, lease, "task")
            if row.cancel_acknowledged_at_ms is None:
                now = self.now
                self._update_row(
                    tx, TASKS, task_ref, cancel_acknowledged_at_ms=now, updated_at_ms=now
                )

    def detach_task(self, task_ref: str, requested_by: str) -> bool:
        """Stop tracking a live task without cancelling it. No-op if terminal or detached."""
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=True)
            if row.terminal_at_ms is not None or row.detached_at_ms is not None:
                return False
            now = self.now
            self._update_row(
                tx, TASKS, task_ref, detached_at_ms=now, next_poll_due_ms=None, updated_at_ms=now
            )
            self._append_task_event(tx, row, ev.TaskDetached, requested_by=requested_by)
        return True

    def record_step_failure(self, task_ref: str, reason: str) -> None:
        """The outer step stopped waiting for this task; the handle stays as it is."""
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref)
            self._append_task_event(tx, row, ev.StepRecoverableFailure, reason=reason)

    def record_server_unreachable(
        self, task_ref: str, since_ms: int, detail: str, *, lease: Membership | None = None
    ) -> None:
        """Report on the task's run that its server has been unreachable since ``since_ms``."""
        with self._write() as tx:
            row = self._task_row(tx.conn, task_ref, lock=lease is not None)
            check_lease(row, lease, "task")
            self._append_task_event(tx, row, ev.ServerUnreachable, since_ms=since_ms, detail=detail)

    def schedule_poll(self, task_ref: str, due_ms: int) -> None:
        """Set when an open task is next due. Terminal and lost tasks are left alone."""
        with self._write() as tx:
            tx.conn.execute(
                update(TASKS)
                .where(self._owned(TASKS), TASKS.c.ref == task_ref, *OPEN_TASK)
                .values(next_poll_due_ms=due_ms)
            )
