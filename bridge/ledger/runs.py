"""The runs aggregate: outer UHP responses, their ids, status, stream position and anomalies.

An outer observation never touches an inner task: the two lifecycles are reconciled apart.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Literal, cast

from sqlalchemy import bindparam, func, insert, or_, update

from bridge import events as ev
from bridge.errors import ConflictingIds, NotFound
from bridge.ids import RUN_PREFIX, new_ref
from bridge.ledger._base import (
    _ROW_BY_REF,
    _ROW_BY_REF_FOR_UPDATE,
    RUNS,
    UPDATE_RUN,
    LedgerCore,
    bind_columns,
    null_row,
    stored_event,
    written_columns,
)
from bridge.ledger.fencing import Membership, check_lease
from bridge.ledger.hotpath import Cursor, DriverSession
from bridge.ledger.outcome import bound_json
from bridge.ledger.queries import RUN_BY_KEY, RUN_BY_RESPONSE, TenantQueries
from bridge.ledger.views import RunView
from bridge.lifecycle import Decision, OuterStatus, decide_outer


class RunStatements:
    """A run's registration and its outer observations as precompiled statements on the
    ledger's driver session (like the call path's, :mod:`bridge.ledger.hotpath`): a served
    response does each at least once, and through Core a transaction cost several times the
    statements in it. Their events are appended with the ledger's
    :class:`~bridge.ledger._base.EventAppend`. Compiled once per ledger (``Ledger._runs``)."""

    def __init__(self, session: DriverSession, *, locks_rows: bool) -> None:
        self._by_response = session.compile(RUN_BY_RESPONSE)
        self._by_key = session.compile(RUN_BY_KEY)
        self.insert_run = session.compile(
            insert(RUNS).values(bind_columns(RUNS, written_columns(RUNS)))
        )
        self.empty_run = null_row(RUNS)
        by_ref = _ROW_BY_REF_FOR_UPDATE if locks_rows else _ROW_BY_REF
        self.run_row = session.compile(by_ref[RUNS.name])
        # An outer observation: each column changes only when given.
        kept: dict[str, Any] = {
            name: func.coalesce(bindparam(f"new_{name}"), RUNS.c[name]) for name in _OUTER_CHANGES
        }
        self.update_outer = session.compile(
            UPDATE_RUN.values(
                **kept,
                updated_at_ms=func.coalesce(bindparam("new_updated_at_ms"), RUNS.c.updated_at_ms),
            )
        )

    def existing(self, cursor: Cursor, principal: str, row: dict[str, Any]) -> Any:
        """The columns of the run already registered under the row's response id (on its
        server), else under its idempotency key; None: neither."""
        if row["response_id"] is not None:
            params = {
                "w_principal": principal,
                "w_server": row["uhp_server"],
                "w_response_id": row["response_id"],
            }
            found = cursor.one(self._by_response, params)
            if found is not None:
                return found
        if row["idempotency_key"] is not None:
            params = {"w_principal": principal, "w_key": row["idempotency_key"]}
            return cursor.one(self._by_key, params)
        return None


#: The run's own columns an outer observation may change.
_OUTER_CHANGES = ("status", "error_json", "last_sequence")


class RunWrites(TenantQueries):
    """Writes of outer responses (runs)."""

    def __init__(self, ledger: LedgerCore, principal: str, runs: RunStatements) -> None:
        super().__init__(ledger, principal)
        self._runs = runs

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
        statements = self._runs
        now = self.now
        ref = new_ref(RUN_PREFIX)
        registered = ev.RunRegistered(
            uhp_server=uhp_server,
            response_id=response_id,
            session_id=session_id,
            harness_id=harness_id,
        )
        row = {
            **statements.empty_run,
            "ref": ref,
            "principal": self.principal,
            "uhp_server": uhp_server,
            "response_id": response_id,
            "session_id": session_id,
            "harness_id": harness_id,
            "status": status.value if status else None,
            "idempotency_key": idempotency_key,
            "request_json": request_json,
            "event_seq": 1,  # its registration is the run's first event
            "created_at_ms": now,
            "updated_at_ms": now,
        }
        _, event = stored_event(self.principal, ref, 1, now, registered)
        driver = self._ledger._driver
        try:
            # One transaction on the driver's connection, the lookup inside it: on SQLite it
            # holds the write lock, so nothing registers the same response in between;
            # elsewhere the unique constraints catch a race (below).
            with driver.transaction() as cursor:
                found = statements.existing(cursor, self.principal, row)
                if found is not None:
                    return RunView.from_columns(found)
                cursor.run(statements.insert_run, row)
                cursor.run(self._ledger._event_append.insert_event, event)
        except driver.integrity_error:
            # A concurrent registration of the same response or key won the race.
            existing = self._find_existing_run(uhp_server, response_id, idempotency_key)
            if existing is None:
                raise
            return existing
        self._ledger._notify(self.principal, ref, 1)
        return RunView.from_columns(row)

    def _find_existing_run(
        self, uhp_server: str, response_id: str | None, idempotency_key: str | None
    ) -> RunView | None:
        if response_id is not None:
            found = self.find_run(uhp_server, response_id)
            if found is not None:
                return found
        if idempotency_key is not None:
            return self.find_run_by_idempotency_key(idempotency_key)
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
            tx.conn.execute(
                update(RUNS)
                .where(self._owned(RUNS), RUNS.c.ref == run_ref)
                .values(updated_at_ms=self.now, **updates)
            )
            self._append(
                tx,
                run_ref,
                ev.OuterIdsRecorded(
                    response_id=updates.get("response_id", row.response_id),
                    session_id=updates.get("session_id", row.session_id),
                ),
            )
        return self.get_run(run_ref)

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
        statements = self._runs
        appends = self._ledger._event_append
        owned = {"w_principal": self.principal, "w_ref": run_ref}
        # Precompiled on the driver's connection, as a registration: each served response
        # reports its end once, and through Core the transaction cost several times its work.
        with self._ledger._driver.transaction() as cursor:
            columns = cursor.one(statements.run_row, owned)
            if columns is None:
                raise NotFound("run", run_ref)
            row = SimpleNamespace(**columns)
            check_lease(row, lease, "run")
            current = OuterStatus(row.status) if row.status is not None else None
            decision = decide_outer(current, status)
            values: dict[str, Any] = dict.fromkeys(_OUTER_CHANGES)  # None: left as it is
            if sequence is not None and (row.last_sequence is None or sequence > row.last_sequence):
                values["last_sequence"] = sequence
            events: list[ev.BridgeEvent] = []
            if decision.is_anomaly:
                kind, detail = "outer_status_regression", decision.reason
                events.append(ev.Anomaly(kind=kind, detail=detail))
            elif decision.records_status:
                values["status"] = status.value
                if status.is_terminal and error is not None:
                    values["error_json"] = bound_json(error, self._ledger.max_outcome_bytes).text
                events.append(ev.OuterStatusChanged(previous=current, status=status))
                if status.is_terminal:
                    events.append(ev.OuterTerminal(status=status, error=error))
            if not events and all(v is None for v in values.values()):
                return decision
            now = self.now
            touched = any(v is not None for v in values.values())
            values["updated_at_ms"] = now if touched else None  # only the run's own columns
            seq = 0
            for event in events:  # each at the run's next number, as every append takes it
                seq = int(cursor.scalar(appends.next_seq, owned))
                _, stored = stored_event(self.principal, run_ref, seq, now, event)
                cursor.run(appends.insert_event, stored)
            changes = {f"new_{name}": value for name, value in values.items()}
            cursor.run(statements.update_outer, {**owned, **changes})
        if events:
            self._ledger._notify(self.principal, run_ref, seq)
        return decision

    def record_trace_context(self, run_ref: str, trace_id: str, span_id: str) -> None:
        """Remember the run's outer span (W3C ids) so a later process continues its trace."""
        with self._write() as tx:
            self._run_row(tx.conn, run_ref)
            tx.conn.execute(
                update(RUNS)
                .where(self._owned(RUNS), RUNS.c.ref == run_ref)
                .values(trace_id=trace_id, span_id=span_id)
            )

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
