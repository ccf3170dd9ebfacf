"""Removing whole runs: every row nested in them, children first, in the caller's transaction.

A run's rows are its dispatches, tasks, input requests, MRTR call rounds, events, agent states,
its webhook outbox rows and the gateway's handles of its tasks. They go together or not
at all (one transaction), so no run is ever left half-deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    ARRAY,
    Connection,
    Delete,
    Select,
    String,
    Table,
    and_,
    any_,
    bindparam,
    delete,
    select,
)
from sqlalchemy.sql.elements import ColumnElement

from bridge._ledger._base import DISPATCHES, EVENTS, INPUTS, RUNS, TASKS, guard_only
from bridge._ledger.schema.models import AgentState, CallRound, GatewayHandle, WebhookOutbox

ROUNDS = cast(Table, CallRound.__table__)  # type: ignore[attr-defined]
AGENT_STATES = cast(Table, AgentState.__table__)  # type: ignore[attr-defined]
GATEWAY_HANDLES = cast(Table, GatewayHandle.__table__)  # type: ignore[attr-defined]
OUTBOX = cast(Table, WebhookOutbox.__table__)  # type: ignore[attr-defined]


def owned_by(table: Table, principal: str) -> ColumnElement[bool]:
    """SQL: the row is the principal's, as a filter on rows an index already found: the
    principal's index would otherwise be chosen for it (SQLite's planner, without statistics),
    and a delete of a few runs would walk every row of the principal."""
    return (table.c.principal + "") == principal


def _among(column: ColumnElement[Any], name: str, postgresql: bool) -> ColumnElement[bool]:
    """SQL: ``column`` is one of the list bound as ``name``. On PostgreSQL one array value
    (``= ANY``): the statement's text is the same for every batch, so the driver prepares it
    once, and no list is expanded into one parameter per value on each execution, work a
    prune would do while holding the interpreter a bridge's calls share."""
    if postgresql:
        return column == any_(bindparam(name, type_=ARRAY(String)))
    return column.in_(bindparam(name, expanding=True))


@cache
def _nested(postgresql: bool) -> list[tuple[Table, ColumnElement[bool]]]:
    """Each table's rows of the runs bound as ``run_refs``, in the order they must be deleted
    (children first), each owned by the principal bound as ``owner``; built once."""

    def owned(table: Table) -> ColumnElement[bool]:
        # the principal as a filter on rows an index already found: the principal's index
        # would otherwise be chosen for it (SQLite's planner, without statistics), and a
        # delete of a few runs would walk every row of the principal
        return guard_only(table.c.principal) == bindparam("owner")

    def of_runs(table: Table) -> ColumnElement[bool]:
        return and_(owned(table), _among(table.c.run_ref, "run_refs", postgresql))

    tasks = select(TASKS.c.ref).where(of_runs(TASKS))
    calls = select(DISPATCHES.c.ref).where(of_runs(DISPATCHES))
    return [
        (INPUTS, and_(owned(INPUTS), INPUTS.c.task_ref.in_(tasks))),
        (INPUTS, and_(owned(INPUTS), INPUTS.c.op_ref.in_(calls))),
        (ROUNDS, and_(owned(ROUNDS), ROUNDS.c.op_ref.in_(calls))),
        (GATEWAY_HANDLES, and_(owned(GATEWAY_HANDLES), GATEWAY_HANDLES.c.task_ref.in_(tasks))),
        (EVENTS, of_runs(EVENTS)),
        (AGENT_STATES, of_runs(AGENT_STATES)),
        (OUTBOX, of_runs(OUTBOX)),
        (TASKS, of_runs(TASKS)),
        (DISPATCHES, of_runs(DISPATCHES)),
        (RUNS, and_(owned(RUNS), _among(RUNS.c.ref, "run_refs", postgresql))),
    ]


@cache
def _deletes(postgresql: bool) -> list[tuple[str, Delete]]:
    return [(table.name, delete(table).where(which)) for table, which in _nested(postgresql)]


@cache
def _reads(postgresql: bool) -> list[tuple[str, Select[Any]]]:
    reads = []
    for table, which in _nested(postgresql):
        if table in ARCHIVED:
            key = table.c.id if "id" in table.c else table.c.ref
            reads.append((table.name, select(table).where(which).order_by(key)))
    return reads


def among_values(
    conn: Connection, column: ColumnElement[Any], values: Sequence[str]
) -> ColumnElement[bool]:
    """SQL: ``column`` is one of ``values`` (as :func:`_among`, the list bound as one value)."""
    if _on_postgresql(conn):
        return column == any_(bindparam(None, list(values), type_=ARRAY(String)))
    return column.in_(list(values))


def _on_postgresql(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


#: The tables an archive holds, parents first (the order an import inserts them in). The
#: gateway's handles are not archived (a handle is a capability for a task that is gone), nor
#: the webhook outbox (what was pushed, not what happened: every attention item has a row,
#: whether or not a webhook is configured, so a finished run's rows go with it).
ARCHIVED: tuple[Table, ...] = (RUNS, DISPATCHES, TASKS, INPUTS, ROUNDS, EVENTS, AGENT_STATES)


def read_runs(conn: Connection, principal: str, run_refs: Sequence[str]) -> dict[str, list[Any]]:
    """Every archived row of the runs, by table name (parents first)."""
    found: dict[str, list[Any]] = {t.name: [] for t in ARCHIVED}
    params = {"owner": principal, "run_refs": list(run_refs)}
    for name, query in _reads(_on_postgresql(conn)):
        found[name].extend(dict(r._mapping) for r in conn.execute(query, params))
    return found


def delete_runs(conn: Connection, principal: str, run_refs: Sequence[str]) -> dict[str, int]:
    """Delete the runs and everything nested in them; the rows removed, by table name."""
    removed: dict[str, int] = {}
    params = {"owner": principal, "run_refs": list(run_refs)}
    for name, statement in _deletes(_on_postgresql(conn)):
        result = conn.execute(statement, params)
        removed[name] = removed.get(name, 0) + int(result.rowcount or 0)
    return removed
