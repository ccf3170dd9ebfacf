"""Reads of one principal's runs, dispatches, tasks, input requests and events.

Every query filters on the principal: another tenant's rows are simply not there.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, Select, bindparam, func, select

from bridge import events as ev
from bridge._errors import NotFound
from bridge._ledger._base import (
    DISPATCHES,
    INPUTS,
    OPEN_RUN,
    OPEN_TASK,
    RUNS,
    TASKS,
    TenantScope,
    events_after_query,
)
from bridge._ledger.reads.lean_reads import DISPATCH_BOOLEANS, TASK_BOOLEANS
from bridge._ledger.reads.views import CallView, InputRequestView, RunView, TaskView
from bridge._lifecycle import CallState


@cache
def _tasks_query(of_run: bool, open_only: bool) -> Select[Any]:
    """The principal's tasks (of one run, open ones), oldest first (built once per shape)."""
    query = select(TASKS).where(TASKS.c.principal == bindparam("w_principal"))
    if of_run:
        query = query.where(TASKS.c.run_ref == bindparam("w_ref"))
    if open_only:
        query = query.where(*OPEN_TASK)
    return query.order_by(TASKS.c.created_at_ms, TASKS.c.ref)


@cache
def _dispatches_query(of_run: bool, in_states: bool) -> Select[Any]:
    """The principal's dispatches (of one run, in some states), oldest first."""
    query = select(DISPATCHES).where(DISPATCHES.c.principal == bindparam("w_principal"))
    if of_run:
        query = query.where(DISPATCHES.c.run_ref == bindparam("w_ref"))
    if in_states:
        query = query.where(DISPATCHES.c.state.in_(bindparam("w_states", expanding=True)))
    return query.order_by(DISPATCHES.c.created_at_ms, DISPATCHES.c.ref)


@cache
def _inputs_query(pending_only: bool) -> Select[Any]:
    """A task's input requests (unanswered ones), in the order they came."""
    query = select(INPUTS).where(
        INPUTS.c.principal == bindparam("w_principal"), INPUTS.c.task_ref == bindparam("w_ref")
    )
    if pending_only:
        query = query.where(INPUTS.c.answered_at_ms.is_(None))
    return query.order_by(INPUTS.c.id)


# Unanswered input requests of every task of one run (what ``input_requests(pending_only=True)``
# finds, counted over the run's tasks at once).
_PENDING_INPUTS_OF_RUN = select(func.count().label("pending")).where(
    INPUTS.c.principal == bindparam("w_principal"),
    INPUTS.c.answered_at_ms.is_(None),
    INPUTS.c.declined_at_ms.is_(None),
    INPUTS.c.task_ref.in_(
        select(TASKS.c.ref).where(
            TASKS.c.principal == bindparam("w_principal"),
            TASKS.c.run_ref == bindparam("w_ref"),
            *OPEN_TASK,
        )
    ),
)
_DISPATCH_BY_OPERATION = select(DISPATCHES).where(
    DISPATCHES.c.principal == bindparam("w_principal"),
    DISPATCHES.c.operation_id == bindparam("w_operation_id"),
)
_TASK_BY_HANDLE = select(TASKS).where(
    TASKS.c.principal == bindparam("w_principal"),
    TASKS.c.server_endpoint == bindparam("w_endpoint"),
    TASKS.c.task_id == bindparam("w_task_id"),
)
RUN_BY_RESPONSE = select(RUNS).where(
    RUNS.c.principal == bindparam("w_principal"),
    RUNS.c.uhp_server == bindparam("w_server"),
    RUNS.c.response_id == bindparam("w_response_id"),
)
RUN_BY_KEY = select(RUNS).where(
    RUNS.c.principal == bindparam("w_principal"), RUNS.c.idempotency_key == bindparam("w_key")
)


class TenantQueries(TenantScope):
    """The read side of a :class:`~bridge._ledger.store.TenantLedger`."""

    def get_run(self, run_ref: str) -> RunView:
        with self._read() as conn:
            return RunView.from_row(self._run_row(conn, run_ref))

    def find_run(self, uhp_server: str, response_id: str) -> RunView | None:
        params = {"w_principal": self.principal, "w_server": uhp_server}
        rows = self._rows(RUN_BY_RESPONSE, {**params, "w_response_id": response_id})
        return RunView.from_columns(rows[0]) if rows else None

    def latest_run_of(self, uhp_server: str, identity: str, separator: str) -> RunView | None:
        """The newest of this principal's runs on ``uhp_server`` recorded under ``identity``
        or ``identity + separator + …`` (a later run under the same identity), None: none.
        An exact prefix (no LIKE: SQLite's is case-blind, and a collation may order
        punctuation away); the suffix is a generation number, so the longest id, then the
        greatest, is the newest."""
        prefix = identity + separator
        response = RUNS.c.response_id
        with self._read() as conn:
            row = conn.execute(
                select(RUNS)
                .where(
                    self._owned(RUNS),
                    RUNS.c.uhp_server == uhp_server,
                    (response == identity) | (func.substr(response, 1, len(prefix)) == prefix),
                )
                .order_by(func.length(response).desc(), response.desc())
                .limit(1)
            ).first()
        return RunView.from_row(row) if row is not None else None

    def find_run_by_idempotency_key(self, idempotency_key: str) -> RunView | None:
        rows = self._rows(RUN_BY_KEY, {"w_principal": self.principal, "w_key": idempotency_key})
        return RunView.from_columns(rows[0]) if rows else None

    def list_runs(
        self, *, limit: int = 50, open_only: bool = False, response_id: str | None = None
    ) -> list[RunView]:
        """The newest runs; ``response_id``: those under that response id (any UHP server)."""
        query = select(RUNS).where(self._owned(RUNS))
        if open_only:
            query = query.where(OPEN_RUN)
        if response_id is not None:
            query = query.where(RUNS.c.response_id == response_id)
        query = query.order_by(RUNS.c.updated_at_ms.desc(), RUNS.c.ref).limit(limit)
        with self._read() as conn:
            return [RunView.from_row(r) for r in conn.execute(query)]

    def unacknowledged_runs(self, uhp_server: str | None = None) -> list[RunView]:
        """Runs created (or about to be) on a remote UHP server that never recorded a response
        id: their POST was sent, or about to be, and no answer was recorded."""
        query = select(RUNS).where(
            self._owned(RUNS),
            RUNS.c.response_id.is_(None),
            RUNS.c.idempotency_key.is_not(None),
            RUNS.c.status.is_(None),
        )
        if uhp_server is not None:
            query = query.where(RUNS.c.uhp_server == uhp_server)
        with self._read() as conn:
            rows = conn.execute(query.order_by(RUNS.c.created_at_ms, RUNS.c.ref))
            return [RunView.from_row(r) for r in rows]

    def run_request(self, run_ref: str) -> str | None:
        """The recorded POST body of a run (JSON, credentials scrubbed), if one was recorded."""
        with self._read() as conn:
            value: str | None = self._run_row(conn, run_ref).request_json
            return value

    def find_dispatch(self, operation_id: str) -> CallView | None:
        """The dispatch recorded under a caller-chosen operation id, if any."""
        return self._dispatch_by_operation(operation_id)

    def get_dispatch(self, op_ref: str) -> CallView:
        with self._read() as conn:
            return CallView.from_row(self._dispatch_row(conn, op_ref))

    def list_dispatches(
        self, *, run_ref: str | None = None, states: Sequence[CallState] | None = None
    ) -> list[CallView]:
        params: dict[str, Any] = {"w_principal": self.principal, "w_ref": run_ref}
        if states is not None:  # an expanding IN list: Core renders it per call
            params["w_states"] = [s.value for s in states]
            query = _dispatches_query(run_ref is not None, True)
            with self._read() as conn:
                return [CallView.from_row(r) for r in conn.execute(query, params)]
        rows = self._rows(_dispatches_query(run_ref is not None, False), params, DISPATCH_BOOLEANS)
        return [CallView.from_columns(columns) for columns in rows]

    def get_task(self, task_ref: str) -> TaskView:
        lean = self._ledger.lean_reads
        if lean is None:
            return self._core_task(task_ref)
        columns = lean.task_row(
            {"w_principal": self.principal, "w_ref": task_ref},
            lambda: dict(self._core_task_row(task_ref)._mapping),
        )
        if columns is None:
            raise NotFound("task", task_ref)
        return TaskView.from_columns(columns)

    def _core_task(self, task_ref: str) -> TaskView:
        return TaskView.from_row(self._core_task_row(task_ref))

    def _core_task_row(self, task_ref: str) -> Any:
        with self._read() as conn:
            return self._task_row(conn, task_ref)

    def run_work(self, run_ref: str) -> tuple[list[TaskView], list[CallView], int]:
        """The run's tasks and dispatches (oldest first) and how many input requests of its
        tasks are unanswered, in one read transaction (one snapshot)."""
        params = {"w_principal": self.principal, "w_ref": run_ref}

        def reads(conn: Connection | None = None) -> tuple[list[TaskView], list[CallView], int]:
            tasks = self._rows(_tasks_query(True, False), params, TASK_BOOLEANS, conn)
            dispatches = self._rows(_dispatches_query(True, False), params, DISPATCH_BOOLEANS, conn)
            (pending,) = self._rows(_PENDING_INPUTS_OF_RUN, params, (), conn)
            return (
                [TaskView.from_columns(columns) for columns in tasks],
                [CallView.from_columns(columns) for columns in dispatches],
                int(pending["pending"]),
            )

        def core() -> tuple[list[TaskView], list[CallView], int]:
            with self._read() as conn:
                return reads(conn)

        lean = self._ledger.lean_reads
        return core() if lean is None else lean.snapshot(reads, core)

    def list_tasks(self, *, run_ref: str | None = None, open_only: bool = False) -> list[TaskView]:
        params = {"w_principal": self.principal, "w_ref": run_ref}
        rows = self._rows(_tasks_query(run_ref is not None, open_only), params, TASK_BOOLEANS)
        return [TaskView.from_columns(columns) for columns in rows]

    def _rows(
        self,
        query: Select[Any],
        params: dict[str, Any],
        booleans: tuple[str, ...] = (),
        conn: Connection | None = None,
    ) -> list[dict[str, Any]]:
        """The rows of one of this module's prebuilt queries: through Core on ``conn`` (a read
        transaction already open) if given, else on the lean path where this thread has one
        (:mod:`bridge._ledger.reads.lean_reads`), else through Core."""

        def core(conn: Connection) -> list[dict[str, Any]]:
            result = conn.execute(query, params)
            names = list(result.keys())
            return [dict(zip(names, row, strict=True)) for row in result]

        def core_alone() -> list[dict[str, Any]]:
            with self._read() as conn:
                return core(conn)

        if conn is not None:
            return core(conn)
        lean = self._ledger.lean_reads
        return core_alone() if lean is None else lean.rows(query, params, core_alone, booleans)

    def due_tasks(self, now_ms: int, *, limit: int = 500) -> list[TaskView]:
        """Open tasks whose next poll is due, oldest due first."""
        query = (
            select(TASKS)
            .where(
                self._owned(TASKS),
                TASKS.c.next_poll_due_ms.is_not(None),
                TASKS.c.next_poll_due_ms <= now_ms,
            )
            .order_by(TASKS.c.next_poll_due_ms, TASKS.c.ref)
            .limit(limit)
        )
        with self._read() as conn:
            return [TaskView.from_row(r) for r in conn.execute(query)]

    def input_requests(
        self, task_ref: str, *, pending_only: bool = False
    ) -> list[InputRequestView]:
        params = {"w_principal": self.principal, "w_ref": task_ref}
        with self._read() as conn:
            rows = conn.execute(_inputs_query(pending_only), params)
            return [InputRequestView.from_row(r) for r in rows]

    def pending_input_requests(self) -> list[InputRequestView]:
        """Unanswered input requests of every open task (offered to the host again); a request
        the bridge declined is no longer the host's to answer."""
        return self._inputs_of_tasks(
            (INPUTS.c.answered_at_ms.is_(None), INPUTS.c.declined_at_ms.is_(None), *OPEN_TASK),
            order_by=(TASKS.c.created_at_ms, TASKS.c.ref, INPUTS.c.id),
        )

    def _inputs_of_tasks(
        self, conditions: tuple[Any, ...], *, order_by: tuple[Any, ...]
    ) -> list[InputRequestView]:
        """This principal's input requests joined to their tasks, filtered on both."""
        query = (
            select(INPUTS)
            .join(TASKS, TASKS.c.ref == INPUTS.c.task_ref)
            .where(self._owned(INPUTS), self._owned(TASKS), *conditions)
            .order_by(*order_by)
        )
        with self._read() as conn:
            return [InputRequestView.from_row(r) for r in conn.execute(query)]

    def input_digests(self, task_refs: Sequence[str]) -> dict[str, dict[str, str]]:
        """Payload digests of every recorded input key of these tasks, by task (one query per
        thousand tasks: a restart or a claim seeds thousands of handles at once)."""
        digests: dict[str, dict[str, str]] = {}
        refs = list(task_refs)
        with self._read() as conn:
            for start in range(0, len(refs), 1000):
                rows = conn.execute(
                    select(INPUTS.c.task_ref, INPUTS.c.key, INPUTS.c.payload_digest).where(
                        self._owned(INPUTS), INPUTS.c.task_ref.in_(refs[start : start + 1000])
                    )
                )
                for task_ref, key, digest in rows:
                    digests.setdefault(task_ref, {})[key] = digest
        return digests

    def events(
        self, run_ref: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[ev.BridgeEvent]:
        """The run's events with ``seq > after_seq``, in order."""
        params = {"w_principal": self.principal, "w_ref": run_ref, "w_after": after_seq}
        lean = self._ledger.lean_reads
        if lean is not None:
            lean_params = params if limit is None else {**params, "w_limit": limit, "w_offset": 0}
            payloads = lean.event_payloads(lean_params, lambda: self._core_payloads(params, limit))
        else:
            payloads = self._core_payloads(params, limit)
        return [ev.parse_event(text) for text in payloads]

    def _core_payloads(self, params: dict[str, Any], limit: int | None) -> list[str]:
        with self._read() as conn:
            return [text for (text,) in conn.execute(events_after_query(limit), params)]

    def run_event_seqs(self, run_refs: Sequence[str]) -> dict[str, int]:
        """The last event ``seq`` of each of these runs (one query; unknown refs are absent):
        what a waiter compares to learn which runs another process wrote to."""
        if not run_refs:
            return {}
        query = select(RUNS.c.ref, RUNS.c.event_seq).where(
            self._owned(RUNS), RUNS.c.ref.in_(list(run_refs))
        )
        with self._read() as conn:
            return {ref: seq for ref, seq in conn.execute(query)}

    def _dispatch_by_operation(self, operation_id: str) -> CallView | None:
        params = {"w_principal": self.principal, "w_operation_id": operation_id}
        rows = self._rows(_DISPATCH_BY_OPERATION, params, DISPATCH_BOOLEANS)
        return CallView.from_columns(rows[0]) if rows else None

    def _task_by_handle(self, server_endpoint: str, task_id: str) -> TaskView | None:
        with self._read() as conn:
            params = {
                "w_principal": self.principal,
                "w_endpoint": server_endpoint,
                "w_task_id": task_id,
            }
            row = conn.execute(_TASK_BY_HANDLE, params).first()
        return TaskView.from_row(row) if row is not None else None


class WriteScope(TenantScope):
    """A write aggregate: the tenant's scope, with its reads passed in beside it."""

    def __init__(self, reads: TenantQueries) -> None:
        super().__init__(reads._ledger, reads.principal)
        self._reads = reads
