"""The call path's result commit finds its call by the key on PostgreSQL, however the
statistics of a long history look (issue 50).

psycopg prepares a statement after a few executions and PostgreSQL may then keep one generic
plan for it. On the statistics of a history where most runs hold one call, the run's index
looks as selective as the key; a commit guarded on the run then walked every call of a busy
run. The generic plan is asked for directly here (``plan_cache_mode``), on such statistics.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text

from bridge._ledger.store import Ledger
from tests.support.builders import ENDPOINT, new_run

pytestmark = pytest.mark.postgres

FEW_CALL_RUNS = 300
BUSY_RUN_CALLS = 60


def _begin(ledger: Ledger, run_ref: str) -> str:
    tenant = ledger.for_principal("acme")
    op = tenant.calls.begin_dispatch(
        run_ref, server_endpoint=ENDPOINT, server_name="s", tool_name="t", arguments={}, sent=True
    )
    return op.ref


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"'{value}'"


def test_the_result_commit_plans_by_the_key_on_a_long_history(pg_ledger: Ledger) -> None:
    tenant = pg_ledger.for_principal("acme")
    for _ in range(FEW_CALL_RUNS):
        _begin(pg_ledger, new_run(tenant).ref)
    busy = new_run(tenant).ref
    calls = [_begin(pg_ledger, busy) for _ in range(BUSY_RUN_CALLS)]
    statement = pg_ledger._hot.result_in_one
    assert statement is not None
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    sql = re.sub(r"%\((\w+)\)s", numbered, statement.sql)
    values = {
        "op_ref": calls[-1],
        "owner": "acme",
        "in_run": busy,
        "from_state": "sent",
        "to_state": "result",
        "now": 1,
        "result_json": "{}",
        "result_truncated": False,
        "task_ref": None,
        "event_type": "call.result",
        "payload_tail": "}",
    }
    with pg_ledger.engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.execute(text("SET plan_cache_mode = force_generic_plan"))
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.execute(f"PREPARE result_commit AS {sql}")
        bound = ", ".join(_literal(values[name]) for name in names)
        plan = "\n".join(row[0] for row in raw.execute(f"EXPLAIN EXECUTE result_commit({bound})"))
        conn.rollback()
    moved = plan.split("CTE bumped")[0]
    assert "bridge_dispatch_intents_pkey" in moved, plan
    assert "ix_bridge_dispatch_intents_run_ref" not in moved, plan
