"""A writer that hammers one run, importable by spawned processes."""

from __future__ import annotations

from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from tests.support.builders import new_task

EVENTS_PER_ITERATION = 4  # anomaly + task.created + task.status_changed + task.terminal


def write_events(url: str, run_ref: str, iterations: int, name: str) -> None:
    ledger = Ledger.open(url, upgrade=False)
    try:
        tenant = ledger.for_principal("acme")
        for i in range(iterations):
            tenant.runs.record_anomaly(run_ref, "probe", f"{name}-{i}")
            task = new_task(tenant, run_ref)
            tenant.tasks.observe_task(
                task.ref,
                TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": False}),
            )
    finally:
        ledger.close()
