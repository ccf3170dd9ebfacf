"""What an operator does about an attention item, each recorded as an event on its run.

Acknowledging a lost task or an anomaly changes nothing but the attention list
(``operator.acknowledged``); closing an orphaned run ends the outer run with a stated status
and reason (``outer.closed_by_operator``) and leaves every inner task of it as it is: the two
lifecycles stay apart.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from bridge import events as ev
from bridge._errors import InvalidTransition, NotFound
from bridge._ledger._base import EVENTS, OPEN_TASK, RUNS, TASKS
from bridge._ledger.outcome import bound_json
from bridge._ledger.reads.attention import parse_anomaly_ref
from bridge._ledger.reads.queries import WriteScope
from bridge._lifecycle import OuterStatus

_ANOMALY: str = ev.Anomaly.model_fields["type"].default
_ACKNOWLEDGED: str = ev.OperatorAcknowledged.model_fields["type"].default
_REASON_CHARS = 500


class OperatorWrites(WriteScope):
    """Acknowledgements and closing an orphaned run."""

    def acknowledge(self, ref: str, by: str, note: str = "") -> ev.OperatorAcknowledged:
        """Acknowledge a lost task (``tk_…``) or an anomaly (``run_…:<seq>``), once.

        Raises ``NotFound`` for neither, ``InvalidTransition`` for a task that is not lost or
        something acknowledged already."""
        anomaly = parse_anomaly_ref(ref)
        with self._write() as tx:
            if anomaly is not None:
                run_ref, seq = anomaly
                found = tx.conn.execute(
                    select(EVENTS.c.id).where(
                        self._owned(EVENTS),
                        EVENTS.c.run_ref == run_ref,
                        EVENTS.c.seq == seq,
                        EVENTS.c.type == _ANOMALY,
                    )
                ).first()
                if found is None:
                    raise NotFound("anomaly", ref)
                self._refuse_twice(tx.conn, run_ref, "anomaly", seq=seq)
                event = ev.OperatorAcknowledged(
                    subject="anomaly", anomaly_seq=seq, by=by, note=note[:_REASON_CHARS]
                )
            else:
                row = self._task_row(tx.conn, ref, lock=True)
                if row.lost_reason is None or row.terminal_at_ms is not None:
                    raise InvalidTransition(f"task {ref} is not lost: nothing to acknowledge")
                run_ref = row.run_ref
                self._refuse_twice(tx.conn, run_ref, "lost_task", task_ref=ref)
                event = ev.OperatorAcknowledged(
                    subject="lost_task", task_ref=ref, by=by, note=note[:_REASON_CHARS]
                )
                # it leaves the open work the attention query and a prune read
                self._update_row(tx, TASKS, ref, acknowledged_at_ms=self.now)
            appended = self._append(tx, run_ref, event)
        assert isinstance(appended, ev.OperatorAcknowledged)
        return appended

    def _refuse_twice(
        self,
        conn: Connection,
        run_ref: str,
        subject: str,
        *,
        seq: int | None = None,
        task_ref: str | None = None,
    ) -> None:
        rows = conn.execute(
            select(EVENTS.c.payload_json).where(
                self._owned(EVENTS),
                EVENTS.c.run_ref == run_ref,
                EVENTS.c.type == _ACKNOWLEDGED,
            )
        )
        for (payload,) in rows:
            done = ev.OperatorAcknowledged.model_validate_json(payload)
            if done.subject == subject and (done.anomaly_seq, done.task_ref) == (seq, task_ref):
                raise InvalidTransition(f"already acknowledged by {done.by}")

    def close_run(
        self, run_ref: str, status: OuterStatus, reason: str, by: str
    ) -> ev.OuterClosedByOperator:
        """End a served run that is still ``in_progress`` with ``status`` (terminal), saying
        why and who. Its inner tasks are not touched: the open ones stay open and watched.
        Raises ``InvalidTransition`` for a status that is not terminal, a run already ended,
        or one followed on a remote UHP server (that server reports its end)."""
        if not status.is_terminal:
            raise InvalidTransition(f"{status.value} is not an end state")
        if not reason.strip():
            raise InvalidTransition("say why the run is closed (a reason is required)")
        with self._write() as tx:
            row = self._run_row(tx.conn, run_ref, lock=True)
            if not row.uhp_server.startswith("local:"):
                raise InvalidTransition(
                    f"run {run_ref} is followed on {row.uhp_server}: its server reports its end"
                )
            if row.status != OuterStatus.IN_PROGRESS.value:
                raise InvalidTransition(f"run {run_ref} is {row.status}, not in_progress")
            open_tasks = [
                ref
                for (ref,) in tx.conn.execute(
                    select(TASKS.c.ref)
                    .where(self._owned(TASKS), TASKS.c.run_ref == run_ref, *OPEN_TASK)
                    .order_by(TASKS.c.created_at_ms, TASKS.c.ref)
                )
            ]
            error = {"message": f"closed by {by}: {reason[:_REASON_CHARS]}"}
            self._update_row(
                tx,
                RUNS,
                run_ref,
                status=status.value,
                error_json=bound_json(error, self._ledger.max_outcome_bytes).text,
                updated_at_ms=self.now,
            )
            previous = OuterStatus.IN_PROGRESS
            self._append(tx, run_ref, ev.OuterStatusChanged(previous=previous, status=status))
            self._append(tx, run_ref, ev.OuterTerminal(status=status, error=error))
            appended = self._append(
                tx,
                run_ref,
                ev.OuterClosedByOperator(
                    status=status,
                    reason=reason[:_REASON_CHARS],
                    by=by,
                    open_task_refs=open_tasks,
                ),
            )
        assert isinstance(appended, ev.OuterClosedByOperator)
        return appended
