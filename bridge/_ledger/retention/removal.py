"""Removing whole runs: every row nested in them, children first, in the caller's transaction.

A run's rows are its dispatches, tasks, input requests, MRTR call rounds, events, agent states,
its webhook outbox rows and the gateway's handles of its tasks. They go together or not
at all (one transaction), so no run is ever left half-deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, Table, delete, select
from sqlalchemy.sql.elements import ColumnElement

from bridge._ledger._base import DISPATCHES, EVENTS, INPUTS, RUNS, TASKS
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


def _nested(principal: str, run_refs: Sequence[str]) -> list[tuple[Table, ColumnElement[bool]]]:
    """Each table's rows of the runs, in the order they must be deleted (children first)."""
    tasks = select(TASKS.c.ref).where(owned_by(TASKS, principal), TASKS.c.run_ref.in_(run_refs))
    calls = select(DISPATCHES.c.ref).where(
        owned_by(DISPATCHES, principal), DISPATCHES.c.run_ref.in_(run_refs)
    )
    return [
        (INPUTS, INPUTS.c.task_ref.in_(tasks)),
        (INPUTS, INPUTS.c.op_ref.in_(calls)),
        (ROUNDS, ROUNDS.c.op_ref.in_(calls)),
        (GATEWAY_HANDLES, GATEWAY_HANDLES.c.task_ref.in_(tasks)),
        (EVENTS, EVENTS.c.run_ref.in_(run_refs)),
        (AGENT_STATES, AGENT_STATES.c.run_ref.in_(run_refs)),
        (OUTBOX, OUTBOX.c.run_ref.in_(run_refs)),
        (TASKS, TASKS.c.run_ref.in_(run_refs)),
        (DISPATCHES, DISPATCHES.c.run_ref.in_(run_refs)),
        (RUNS, RUNS.c.ref.in_(run_refs)),
    ]


#: The tables an archive holds, parents first (the order an import inserts them in). The
#: gateway's handles are not archived (a handle is a capability for a task that is gone), nor
#: the webhook outbox (what was pushed, not what happened: every attention item has a row,
#: whether or not a webhook is configured, so a finished run's rows go with it).
ARCHIVED: tuple[Table, ...] = (RUNS, DISPATCHES, TASKS, INPUTS, ROUNDS, EVENTS, AGENT_STATES)


def read_runs(conn: Connection, principal: str, run_refs: Sequence[str]) -> dict[str, list[Any]]:
    """Every archived row of the runs, by table name (parents first)."""
    found: dict[str, list[Any]] = {t.name: [] for t in ARCHIVED}
    for table, which in _nested(principal, run_refs):
        if table.name not in found:
            continue
        key = table.c.id if "id" in table.c else table.c.ref
        rows = conn.execute(select(table).where(owned_by(table, principal), which).order_by(key))
        found[table.name].extend(dict(r._mapping) for r in rows)
    return found


def delete_runs(conn: Connection, principal: str, run_refs: Sequence[str]) -> dict[str, int]:
    """Delete the runs and everything nested in them; the rows removed, by table name."""
    removed: dict[str, int] = {}
    for table, which in _nested(principal, run_refs):
        result = conn.execute(delete(table).where(owned_by(table, principal), which))
        removed[table.name] = removed.get(table.name, 0) + int(result.rowcount or 0)
    return removed
