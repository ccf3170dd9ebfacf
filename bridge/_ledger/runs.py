"""The runs aggregate: outer UHP responses, their ids, status, stream position and anomalies.

An outer observation never touches an inner task: the two lifecycles are reconciled apart.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from sqlalchemy import insert, or_, update

from bridge import events as ev
from bridge._errors import ConflictingIds
from bridge._ids import RUN_PREFIX, new_ref
from bridge._ledger._base import RUNS, Tx, bind_columns, null_row, written_columns
from bridge._ledger.fencing import Membership, check_lease
from bridge._ledger.outcome import bound_json
from bridge._ledger.reads.queries import RUN_BY_KEY, RUN_BY_RESPONSE, WriteScope
from bridge._ledger.reads.views import RunView
from bridge._lifecycle import Decision, OuterStatus, decide_outer

# A run's registration and its outer observations run precompiled in transactions of the
# driver session (like the call path's, :mod:`bridge._ledger.commit.driver_sessions`): a served
# response does each at least once, and through Core a transaction cost several times the statements
# in it.
_INSERT_RUN = insert(RUNS).values(bind_columns(RUNS, written_columns(RUNS)))
_EMPTY_RUN = null_row(RUNS)


class RunWrites(WriteScope):
    """Writes of outer responses (runs)."""

    def open_run(
        self,
        uhp_server: str,
        *,
        response_id: str | None = None,
        session_id: str | None = None,
        harness_id: str | None = None,
        idempotency_key: str | None = None,
        status: OuterStatus | None = None,
        request_json: str | None = None,
    ) -> RunView:
        """Register an outer response. Idempotent on the response id and on the idempotency key.

        For a response this process will create on a remote UHP server, call this with the
        ``idempotency_key`` (and the scrubbed ``request_json`` it is sent with) *before* the
        POST, then :meth:`record_outer_ids` once it answers.
        """
        now = self.now
        ref = new_ref(RUN_PREFIX)
        row = {
            **_EMPTY_RUN,
            "ref": ref,
            "principal": self.principal,
            "uhp_server": uhp_server,
            "response_id": response_id,
            "session_id": session_id,
            "harness_id": harness_id,
            "status": status.value if status else None,
            "idempotency_key": idempotency_key,
            "request_json": request_json,
            "event_seq": 0,
            "created_at_ms": now,
            "updated_at_ms": now,
        }
        driver = self._ledger._driver
        try:
            # The lookup inside the registration's own transaction: on SQLite it holds the
            # write lock, so nothing registers the same response in between; elsewhere the
            # unique constraints catch a race (below).
            with self._ledger._driver_write() as tx:
                found = self._registered(tx, row)
                if found is not None:
                    return RunView.from_columns(found)
                tx.run(driver.compiled(_INSERT_RUN), row)
                registered = ev.RunRegistered(
                    uhp_server=uhp_server,
                    response_id=response_id,
                    session_id=session_id,
                    harness_id=harness_id,
                )
                row["event_seq"] = self._append(tx, ref, registered).seq
        except driver.integrity_error:
            # A concurrent registration of the same response or key won the race: its run.
            with self._ledger._driver_write() as tx:
                found = self._registered(tx, row)
            if found is None:
                raise
            return RunView.from_columns(found)
        driver.confirm_durable()  # a new run is work accepted: it must be on a file that lasts
        return RunView.from_columns(row)

    def _registered(self, tx: Tx, row: dict[str, Any]) -> dict[str, Any] | None:
        """The columns of the run already registered under the row's response id (on its
        server), else under its idempotency key; None: neither."""
        compiled = self._ledger._driver.compiled
        if row["response_id"] is not None:
            params = {"w_principal": self.principal, "w_server": row["uhp_server"]}
            by_response = compiled(RUN_BY_RESPONSE)
            found = tx.one(by_response, {**params, "w_response_id": row["response_id"]})
            if found is not None:
                return found
        if row["idempotency_key"] is not None:
            params = {"w_principal": self.principal, "w_key": row["idempotency_key"]}
            return tx.one(compiled(RUN_BY_KEY), params)
        return None

    def record_outer_ids(
        self,
        run_ref: str,
        *,
        response_id: str,
        session_id: str | None = None,
        harness_id: str | None = None,
    ) -> RunView:
        """Record the ids a UHP server assigned. Set once; a different value is refused."""
        with self._write() as tx:
            row = self._run_row(tx.conn, run_ref, lock=True)
            updates: dict[str, Any] = {}
            for name, offered in (
                ("response_id", response_id),
                ("session_id", session_id),
                ("harness_id", harness_id),
            ):
                held = getattr(row, name)
                if offered is None or held == offered:
                    continue
                if held is not None:
                    raise ConflictingIds(f"run {run_ref!r} already has a different {name}")
                updates[name] = offered
            if not updates:
                return RunView.from_row(row)
            self._update_row(tx, RUNS, run_ref, updated_at_ms=self.now, **updates)
            self._append(
                tx,
                run_ref,
                ev.OuterIdsRecorded(
                    response_id=updates.get("response_id", row.response_id),
                    session_id=updates.get("session_id", row.session_id),
                ),
            )
        return self._reads.get_run(run_ref)

    def observe_outer(
        self,
        run_ref: str,
        status: OuterStatus,
        *,
        sequence: int | None = None,
        error: Any = None,
        lease: Membership | None = None,
    ) -> Decision:
        """Apply an observed UHP response status. Never touches any inner task.

        With ``lease`` (a remotely followed run leased to this replica), refused with
        ``LeaseLost`` unless this replica incarnation still holds the run.
        """
        # Each served response reports its end once: precompiled, as its registration.
        with self._ledger._driver_write() as tx:
            row = self._locked_row(tx, RUNS, run_ref, "run")
            check_lease(row, lease, "run")
            current = OuterStatus(row.status) if row.status is not None else None
            decision = decide_outer(current, status)
            values: dict[str, Any] = {}
            if sequence is not None and (row.last_sequence is None or sequence > row.last_sequence):
                values["last_sequence"] = sequence
            if decision.is_anomaly:
                anomaly = ev.Anomaly(kind="outer_status_regression", detail=decision.reason)
                self._append(tx, run_ref, anomaly)
            elif decision.records_status:
                values["status"] = status.value
                if status.is_terminal and error is not None:
                    values["error_json"] = bound_json(error, self._ledger.max_outcome_bytes).text
                self._append(tx, run_ref, ev.OuterStatusChanged(previous=current, status=status))
                if status.is_terminal:
                    self._append(tx, run_ref, ev.OuterTerminal(status=status, error=error))
            if values:
                self._update_row(tx, RUNS, run_ref, **values, updated_at_ms=self.now)
        return decision

    def record_trace_context(self, run_ref: str, trace_id: str, span_id: str) -> None:
        """Remember the run's outer span (W3C ids) so a later process continues its trace."""
        with self._write() as tx:
            self._run_row(tx.conn, run_ref)
            self._update_row(tx, RUNS, run_ref, trace_id=trace_id, span_id=span_id)

    def record_outer_sequence(
        self, run_ref: str, sequence: int, *, lease: Membership | None = None
    ) -> bool:
        """Advance the last seen stream ``sequence_number``; never moves it backwards."""
        with self._write() as tx:
            query = update(RUNS).where(
                self._owned(RUNS),
                RUNS.c.ref == run_ref,
                or_(RUNS.c.last_sequence.is_(None), RUNS.c.last_sequence < sequence),
            )
            if lease is not None:
                query = query.where(
                    RUNS.c.lease_owner == lease.replica_id,
                    RUNS.c.lease_incarnation == lease.incarnation,
                )
            result = tx.conn.execute(query.values(last_sequence=sequence, updated_at_ms=self.now))
            if result.rowcount == 0:
                # NotFound for a foreign/unknown run, LeaseLost for a run held elsewhere
                check_lease(self._run_row(tx.conn, run_ref), lease, "run")
                return False
        return True

    def record_stream_lost(
        self,
        run_ref: str,
        reason: str,
        last_sequence: int | None,
        *,
        lease: Membership | None = None,
    ) -> None:
        """The outer stream broke; the response itself is unaffected (it continues server-side)."""
        with self._write() as tx:
            check_lease(self._run_row(tx.conn, run_ref, lock=True), lease, "run")
            if last_sequence is not None:
                tx.conn.execute(
                    update(RUNS)
                    .where(
                        self._owned(RUNS),
                        RUNS.c.ref == run_ref,
                        or_(RUNS.c.last_sequence.is_(None), RUNS.c.last_sequence < last_sequence),
                    )
                    .values(last_sequence=last_sequence, updated_at_ms=self.now)
                )
            self._append(
                tx, run_ref, ev.OuterStreamLost(reason=reason, last_sequence=last_sequence)
            )

    def record_stream_resumed(
        self,
        run_ref: str,
        mode: Literal["last_event_id", "reread"],
        after_sequence: int | None,
        *,
        lease: Membership | None = None,
    ) -> None:
        with self._write() as tx:
            check_lease(self._run_row(tx.conn, run_ref, lock=lease is not None), lease, "run")
            self._append(tx, run_ref, ev.OuterResumed(mode=mode, after_sequence=after_sequence))

    def record_fields_ignored(
        self, run_ref: str, fields: list[str], *, lease: Membership | None = None
    ) -> None:
        """The server named request fields it did not act on (``metadata.ignored_fields``)."""
        with self._write() as tx:
            check_lease(self._run_row(tx.conn, run_ref, lock=lease is not None), lease, "run")
            self._append(tx, run_ref, ev.OuterFieldsIgnored(fields=fields))

    def record_anomaly(
        self,
        run_ref: str,
        kind: str,
        detail: str,
        *,
        task_ref: str | None = None,
        op_ref: str | None = None,
        lease: Membership | None = None,
    ) -> ev.Anomaly:
        """Record something malformed or contradictory that was observed and ignored.

        ``lease`` fences an anomaly observed while polling a leased task (``task_ref``).
        """
        with self._write() as tx:
            self._run_row(tx.conn, run_ref)
            raw_task_id = None
            if task_ref is not None:
                task_row = self._task_row(tx.conn, task_ref, lock=lease is not None)
                check_lease(task_row, lease, "task")
                raw_task_id = task_row.task_id
            appended = self._append(
                tx,
                run_ref,
                ev.Anomaly(kind=kind, detail=detail, task_ref=task_ref, op_ref=op_ref),
                raw_task_id=raw_task_id,
            )
        return cast(ev.Anomaly, appended)

    def record_open_tasks_at_end(
        self,
        run_ref: str,
        status: OuterStatus,
        task_refs: list[str],
        action: Literal["reported", "cancel_requested"],
    ) -> None:
        with self._write() as tx:
            self._run_row(tx.conn, run_ref)
            self._append(
                tx,
                run_ref,
                ev.OuterOpenTasks(status=status, task_refs=task_refs, action=action),
            )
