"""Importing an archive (:mod:`~bridge._ledger.retention.archive`) back into a ledger.

Into an empty ledger it restores the runs' reads: ``show``, ``timeline`` and ``events`` read
them as before the prune. A run already in the ledger is left as it is (an archive may hold a run
twice: a crash between a batch's archive and its deletes). Every row must belong to the principal
the import is scoped to; one that does not refuses the whole member it is in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Table, insert, select

from bridge._ledger._base import DISPATCHES, EVENTS, INPUTS, RUNS, TASKS
from bridge._ledger.retention.archive import ArchiveError, Member, read_members
from bridge._ledger.retention.removal import AGENT_STATES, ARCHIVED, ROUNDS
from bridge._ledger.store import Ledger

_LEASED = ("lease_owner", "lease_incarnation")
_FINAL_VERDICTS = ("admitted", "not_admitted")


@dataclass(slots=True)
class ImportReport:
    """What an import restored for one principal (``skipped``: runs already in the ledger)."""

    principal: str
    runs: int = 0
    skipped: int = 0
    rows: dict[str, int] = field(default_factory=dict)

    def record(self) -> dict[str, object]:
        return {
            "principal": self.principal,
            "runs": self.runs,
            "skipped": self.skipped,
            "rows": dict(self.rows),
        }


def _kept(table: Table, rows: list[dict[str, Any]], taken: dict[str, set[str]]) -> list[Any]:
    """The rows of ``table`` that belong to runs being restored (by the refs taken so far)."""
    if table is RUNS:
        return [r for r in rows if r["ref"] in taken["runs"]]
    if table in (DISPATCHES, TASKS, EVENTS, AGENT_STATES):
        return [r for r in rows if r["run_ref"] in taken["runs"]]
    if table is INPUTS:
        return [r for r in rows if r["task_ref"] in taken["tasks"] or r["op_ref"] in taken["ops"]]
    if table is ROUNDS:
        return [r for r in rows if r["op_ref"] in taken["ops"]]
    return []


def _settled_by_events(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """When each call got its final verdict and each lost task its acknowledgement, by the
    events: an archive written before the rows carried them (migration 0015) lacks them, and
    without them the restored calls and tasks would wait for a person again."""
    settled: dict[str, dict[str, Any]] = {"resolved_at_ms": {}, "acknowledged_at_ms": {}}
    for event in events:
        if event.get("type") not in ("call.admission_checked", "operator.acknowledged"):
            continue
        data = json.loads(event["payload_json"])
        if data.get("admission") in _FINAL_VERDICTS and data.get("op_ref"):
            settled["resolved_at_ms"][data["op_ref"]] = event["at_ms"]
        elif data.get("subject") == "lost_task" and data.get("task_ref"):
            settled["acknowledged_at_ms"][data["task_ref"]] = event["at_ms"]
    return settled


def _restore_member(conn: Connection, principal: str, member: Member, report: ImportReport) -> None:
    if member.principal != principal:
        raise ArchiveError(f"the archive holds runs of another principal ({member.principal!r})")
    for table_rows in member.rows.values():
        if any(row.get("principal") != principal for row in table_rows):
            raise ArchiveError("the archive holds rows of another principal")
    refs = {str(r["ref"]) for r in member.rows.get(RUNS.name, [])}
    present = set(
        conn.execute(
            select(RUNS.c.ref).where(RUNS.c.principal == principal, RUNS.c.ref.in_(refs))
        ).scalars()
    )
    taken: dict[str, set[str]] = {"runs": refs - present, "tasks": set(), "ops": set()}
    report.skipped += len(present)
    settled = _settled_by_events(member.rows.get(EVENTS.name, []))
    for table in ARCHIVED:
        rows = _kept(table, member.rows.get(table.name, []), taken)
        unique: dict[Any, dict[str, Any]] = {}
        for row in rows:  # the same run twice in one member cannot happen; rows once each
            values = {k: v for k, v in row.items() if k in table.c and k != "id"}
            values.update(dict.fromkeys(_LEASED) if "lease_owner" in table.c else {})
            key = row.get("ref") or row.get("id")
            for column, at_ms in settled.items():
                if column in table.c and values.get(column) is None:
                    values[column] = at_ms.get(key)  # every row binds the same columns
            unique[key] = values
        if table is TASKS:
            taken["tasks"] = {str(r["ref"]) for r in unique.values()}
        elif table is DISPATCHES:
            taken["ops"] = {str(r["ref"]) for r in unique.values()}
        if unique:
            conn.execute(insert(table), list(unique.values()))
            report.rows[table.name] = report.rows.get(table.name, 0) + len(unique)
    report.runs += len(taken["runs"])


def import_archive(ledger: Ledger, principal: str, path: Path) -> ImportReport:
    """Restore the runs of the archive at ``path`` (one transaction per batch it holds)."""
    if not principal:
        raise ValueError("a principal/tenant is required for every ledger access")
    report = ImportReport(principal)
    for member in read_members(path):
        with ledger.engine.begin() as conn:
            _restore_member(conn, principal, member, report)
    if report.runs and ledger.dialect.name == "postgresql":
        # Statistics of the rows just loaded, before autovacuum gets to them: a planner
        # without them plans the next reads for the tables as they were.
        with ledger.engine.connect() as conn:
            auto = conn.execution_options(isolation_level="AUTOCOMMIT")
            auto.exec_driver_sql("ANALYZE " + ", ".join(table.name for table in ARCHIVED))
    return report
