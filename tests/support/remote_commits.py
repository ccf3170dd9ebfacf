"""Commits made by another process (spawned), for the waking tests."""

from __future__ import annotations

from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus


def complete_task(url: str, principal: str, task_ref: str) -> None:
    """Settle one task from a process of its own (a second harness replica, a CLI)."""
    ledger = Ledger.open(url, upgrade=False)
    try:
        ledger.for_principal(principal).tasks.observe_task(
            task_ref,
            TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": False}),
        )
    finally:
        ledger.close()
