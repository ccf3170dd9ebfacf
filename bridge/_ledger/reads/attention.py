"""What waits for a person, across one principal's runs: the attention query.

Every item is derived at read time from rows and events already recorded (nothing is stored
for it), in one read transaction, oldest first. An item leaves the list once acted upon: an
input answered or declined, a call given a final verdict, a lost task or an anomaly
acknowledged (``operator.acknowledged``), an orphaned run closed.

An **orphaned run** is a run this side serves itself (``uhp_server = local:<harness>``, as
``register_served_run`` records it) that is still ``in_progress`` although nothing about it
has been recorded for ``orphan_after_ms``: no event on it, no change of its row, no
observation of any of its tasks, and nothing of its own waits for a person (an input, a call
of unknown outcome without a final verdict, a lost task not yet acknowledged: a harness alive
and waiting for that person records nothing either, so such a run is listed by that item
alone; acting on it is news of the run, and only a run still silent after that is orphaned).
Only its harness reports a served run's end; a harness that died never will.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (
    Connection,
    Select,
    String,
    Table,
    and_,
    bindparam,
    func,
    literal,
    literal_column,
    select,
)
from sqlalchemy.sql.elements import ColumnElement

from bridge import events as ev
from bridge._ledger._base import (
    DISPATCHES,
    EVENTS,
    INPUTS,
    OPEN_RUN,
    OPEN_TASK,
    RUNS,
    TASKS,
    scrub_raw_id,
)
from bridge._ledger.reads.queries import WriteScope
from bridge._ledger.reads.views import AttentionFact, AttentionKind
from bridge._lifecycle import CallState

_ANOMALY: str = ev.Anomaly.model_fields["type"].default
_ACKNOWLEDGED: str = ev.OperatorAcknowledged.model_fields["type"].default
_SERVED_PREFIX = "local:"
#: How long an input waits before it is overdue, and a served run stays silent before it is
#: orphaned, unless the caller says otherwise.
DEFAULT_OVERDUE_AFTER_MS = 60 * 60 * 1000
DEFAULT_ORPHAN_AFTER_MS = 60 * 60 * 1000
#: Items that explain a served run's silence: its harness may be alive, waiting on them.
_RUN_WAITS_ON_A_PERSON = frozenset(
    {"input_waiting", "input_overdue", "unknown_outcome", "lost_task"}
)
_QUESTION_CHARS = 2000  # of a message, in an item (the request itself is kept whole)


@dataclass(frozen=True, slots=True)
class AttentionWindow:
    """The clock and thresholds one attention read uses."""

    now_ms: int
    overdue_after_ms: int = DEFAULT_OVERDUE_AFTER_MS
    orphan_after_ms: int = DEFAULT_ORPHAN_AFTER_MS


def anomaly_ref(run_ref: str, seq: int) -> str:
    """The reference of an anomaly: its event on its run."""
    return f"{run_ref}:{seq}"


def parse_anomaly_ref(ref: str) -> tuple[str, int] | None:
    """``(run_ref, seq)`` of an anomaly reference; None if ``ref`` is not one."""
    run_ref, sep, seq = ref.rpartition(":")
    if not sep or not run_ref or not seq.isdigit():
        return None
    return run_ref, int(seq)


def question_of(params: Any) -> tuple[str | None, tuple[str, ...], Any]:
    """What an input request asks: its message, its schema's field names, the schema."""
    if not isinstance(params, dict):
        return None, (), None
    message = params.get("message")
    schema = params.get("requestedSchema")
    fields: tuple[str, ...] = ()
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        fields = tuple(str(name) for name in schema["properties"])
    text = message[:_QUESTION_CHARS] if isinstance(message, str) else None
    return text, fields, schema if isinstance(schema, dict) else None


# The statements, built once (building a statement costs more than running it here).
def _mine(table: Table) -> ColumnElement[bool]:
    return table.c.principal == bindparam("w_principal")


def _waiting_inputs(owner: Any, table: Table, task_id: Any, *where: Any) -> Select[Any]:
    """Unanswered input requests of ``owner`` (a task or a call, in ``table``), with its run."""
    columns = (INPUTS.c.ref, INPUTS.c.method, INPUTS.c.params_json, INPUTS.c.first_seen_ms)
    of = (table.c.run_ref, table.c.tool_name, table.c.server_name, table.c.server_endpoint)
    return (
        select(*columns, owner, *of, task_id, RUNS.c.response_id)
        .join(table, table.c.ref == owner)
        .join(RUNS, RUNS.c.ref == table.c.run_ref)
        .where(_mine(INPUTS), _mine(table), *where)
    )


@cache
def _input_queries() -> tuple[Select[Any], Select[Any]]:
    """Waiting inputs of open tasks, then of calls waiting before any task."""
    waiting = (INPUTS.c.answered_at_ms.is_(None), INPUTS.c.declined_at_ms.is_(None))
    call_waits = DISPATCHES.c.state == CallState.INPUT_REQUIRED.value
    no_task = literal(None).label("task_id")
    return (
        _waiting_inputs(INPUTS.c.task_ref, TASKS, TASKS.c.task_id, *waiting, *OPEN_TASK),
        _waiting_inputs(INPUTS.c.op_ref, DISPATCHES, no_task, call_waits, *waiting),
    )


# Open work only: a call resolved with a final verdict, a lost task acknowledged, leaves the
# partial indexes these read (the state a literal, as the index spells it: a planner matches a
# partial index's condition against the statement's text, not against a bound value).
_UNKNOWN_CALLS = (
    select(DISPATCHES, RUNS.c.response_id)
    .join(RUNS, RUNS.c.ref == DISPATCHES.c.run_ref)
    .where(
        _mine(DISPATCHES),
        DISPATCHES.c.state == literal_column(f"'{CallState.UNKNOWN.value}'", String),
        DISPATCHES.c.resolved_at_ms.is_(None),
    )
)
_ACKNOWLEDGEMENTS_ON = select(EVENTS.c.run_ref, EVENTS.c.payload_json).where(
    _mine(EVENTS),
    EVENTS.c.run_ref.in_(bindparam("w_runs", expanding=True)),
    EVENTS.c.type == _ACKNOWLEDGED,
)
_LOST_TASKS = (
    select(TASKS, RUNS.c.response_id.label("run_response_id"))
    .join(RUNS, RUNS.c.ref == TASKS.c.run_ref)
    .where(
        _mine(TASKS),
        TASKS.c.lost_reason.is_not(None),
        TASKS.c.terminal_at_ms.is_(None),
        TASKS.c.acknowledged_at_ms.is_(None),
    )
)
_ANOMALIES = (
    select(
        EVENTS.c.run_ref, EVENTS.c.seq, EVENTS.c.payload_json, EVENTS.c.at_ms, RUNS.c.response_id
    )
    .join(RUNS, RUNS.c.ref == EVENTS.c.run_ref)
    .where(_mine(EVENTS), EVENTS.c.type == _ANOMALY)
)
_LAST_EVENT = EVENTS.alias("last_event")
_SILENT_SERVED_RUNS = (
    select(
        RUNS.c.ref,
        RUNS.c.response_id,
        RUNS.c.updated_at_ms,
        _LAST_EVENT.c.at_ms,
        select(func.max(TASKS.c.updated_at_ms))
        .where(TASKS.c.run_ref == RUNS.c.ref)
        .scalar_subquery()
        .label("task_at_ms"),
    )
    .outerjoin(
        _LAST_EVENT,
        and_(_LAST_EVENT.c.run_ref == RUNS.c.ref, _LAST_EVENT.c.seq == RUNS.c.event_seq),
    )
    .where(
        _mine(RUNS),
        OPEN_RUN,
        RUNS.c.status.is_not(None),
        func.substr(RUNS.c.uhp_server, 1, len(_SERVED_PREFIX)) == _SERVED_PREFIX,
        RUNS.c.updated_at_ms <= bindparam("w_cutoff"),
    )
)


class AttentionReads(WriteScope):
    """The attention query of one principal."""

    def attention(self, window: AttentionWindow) -> list[AttentionFact]:
        """Everything of this principal that waits for a person, oldest first."""
        with self._read() as conn:
            items = [
                *self._inputs(conn, window),
                *self._unknown_calls(conn),
                *self._lost_tasks(conn),
                *self._anomalies(conn),
            ]
            waiting = {item.run_ref for item in items if item.kind in _RUN_WAITS_ON_A_PERSON}
            items += [
                item for item in self._orphaned_runs(conn, window) if item.run_ref not in waiting
            ]
        return sorted(items, key=lambda item: (item.since_ms, item.kind, item.ref))

    # -- inputs --------------------------------------------------------------------------------
    def _inputs(self, conn: Connection, window: AttentionWindow) -> Iterable[AttentionFact]:
        of_tasks, of_calls = _input_queries()
        mine = {"w_principal": self.principal}
        rows = [*conn.execute(of_tasks, mine), *conn.execute(of_calls, mine)]
        for row in rows:
            owner = row[4]
            params = row.params_json  # server text: it may quote the raw task id
            if row.task_id:
                params = scrub_raw_id(params, row.task_id, owner)
            question, fields, schema = question_of(json.loads(params))
            overdue = window.now_ms - row.first_seen_ms >= window.overdue_after_ms
            kind: AttentionKind = "input_overdue" if overdue else "input_waiting"
            yield AttentionFact(
                kind=kind,
                ref=row.ref,
                principal=self.principal,
                run_ref=row.run_ref,
                response_id=row.response_id,
                since_ms=row.first_seen_ms,
                task_ref=owner if owner.startswith("tk_") else None,
                op_ref=owner if owner.startswith("op_") else None,
                question=question,
                fields=fields,
                requested_schema=schema,
                server=row.server_name or row.server_endpoint,
                tool=row.tool_name,
                method=row.method,
            )

    # -- calls of unknown outcome ----------------------------------------------------------------
    def _unknown_calls(self, conn: Connection) -> Iterable[AttentionFact]:
        calls = conn.execute(_UNKNOWN_CALLS, {"w_principal": self.principal}).all()
        for call in calls:
            yield AttentionFact(
                kind="unknown_outcome",
                ref=call.ref,
                principal=self.principal,
                run_ref=call.run_ref,
                response_id=call.response_id,
                since_ms=call.updated_at_ms,
                op_ref=call.ref,
                server=call.server_name or call.server_endpoint,
                tool=call.tool_name,
                reason=call.unknown_reason,
            )

    # -- lost tasks, anomalies ---------------------------------------------------------------------
    def _anomalies_acknowledged(self, conn: Connection, run_refs: set[str]) -> set[tuple[str, int]]:
        """The anomalies of these runs an operator acknowledged (read on their runs only)."""
        done: set[tuple[str, int]] = set()
        mine = {"w_principal": self.principal, "w_runs": sorted(run_refs)}
        for run_ref, payload in conn.execute(_ACKNOWLEDGEMENTS_ON, mine):
            data = json.loads(payload)
            if data.get("subject") == "anomaly" and data.get("anomaly_seq") is not None:
                done.add((run_ref, int(data["anomaly_seq"])))
        return done

    def _lost_tasks(self, conn: Connection) -> Iterable[AttentionFact]:
        for task in conn.execute(_LOST_TASKS, {"w_principal": self.principal}):
            yield AttentionFact(
                kind="lost_task",
                ref=task.ref,
                principal=self.principal,
                run_ref=task.run_ref,
                response_id=task.run_response_id,
                since_ms=task.updated_at_ms,
                task_ref=task.ref,
                op_ref=task.op_ref,
                server=task.server_name or task.server_endpoint,
                tool=task.tool_name,
                reason=task.lost_reason,
                detail=task.lost_detail,
            )

    def _anomalies(self, conn: Connection) -> Iterable[AttentionFact]:
        rows = conn.execute(_ANOMALIES, {"w_principal": self.principal}).all()
        if not rows:
            return
        acknowledged = self._anomalies_acknowledged(conn, {row.run_ref for row in rows})
        for row in rows:
            if (row.run_ref, row.seq) in acknowledged:
                continue
            data = json.loads(row.payload_json)
            ref = anomaly_ref(row.run_ref, row.seq)
            yield AttentionFact(
                kind="anomaly",
                ref=ref,
                principal=self.principal,
                run_ref=row.run_ref,
                response_id=row.response_id,
                since_ms=row.at_ms,
                task_ref=data.get("task_ref"),
                op_ref=data.get("op_ref"),
                reason=data.get("kind"),
                detail=data.get("detail"),
            )

    # -- orphaned runs ---------------------------------------------------------------------------
    def _orphaned_runs(self, conn: Connection, window: AttentionWindow) -> Iterable[AttentionFact]:
        cutoff = window.now_ms - window.orphan_after_ms
        params = {"w_principal": self.principal, "w_cutoff": cutoff}
        candidates = conn.execute(_SILENT_SERVED_RUNS, params).all()
        for row in candidates:
            last = max(row.updated_at_ms, row.at_ms or 0, row.task_at_ms or 0)
            if last > cutoff:
                continue
            ref = row.ref
            yield AttentionFact(
                kind="orphaned_run",
                ref=ref,
                principal=self.principal,
                run_ref=ref,
                response_id=row.response_id,
                since_ms=last,
            )
