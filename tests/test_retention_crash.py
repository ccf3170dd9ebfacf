"""A prune SIGKILLed part-way (a real ``bridge prune`` process) loses nothing live and leaves no
run half-deleted: every run is either whole, as before, or gone with everything in it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select

from bridge._ledger._base import DISPATCHES, EVENTS, INPUTS, RUNS, TASKS
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import OuterStatus, TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import new_run, new_task

PRINCIPAL = "acme"
LONG_AGO_MS = 1_600_000_000_000
FINISHED = 160
DEADLINE_S = 60.0

pytestmark = pytest.mark.e2e


def seed(tenant: TenantLedger) -> set[str]:
    """Finished runs (a task that asked for input and completed) with live ones among them;
    the live runs' references."""
    live = set()
    for i in range(FINISHED):
        run = new_run(tenant)
        task = new_task(tenant, run.ref)
        asks = {"k": {"method": "elicitation/create", "params": {"message": "ok?"}}}
        tenant.tasks.observe_task(
            task.ref, TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests=asks)
        )
        tenant.tasks.observe_task(
            task.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": []})
        )
        tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)
        if i % 40 == 0:
            live.add(new_run(tenant).ref)  # open
            waiting = new_run(tenant)
            new_task(tenant, waiting.ref)  # its task still works
            tenant.runs.observe_outer(waiting.ref, OuterStatus.COMPLETED)
            live.add(waiting.ref)
    return live


def shape(ledger: Ledger) -> dict[str, tuple[int, int, int, int]]:
    """Each run's (dispatches, tasks, input requests, events) counts."""
    counts: dict[str, list[int]] = {}
    with ledger._read() as conn:
        for (ref,) in conn.execute(select(RUNS.c.ref).where(RUNS.c.principal == PRINCIPAL)):
            counts[ref] = [0, 0, 0, 0]
        for i, table in enumerate((DISPATCHES, TASKS)):
            rows = conn.execute(select(table.c.run_ref, func.count()).group_by(table.c.run_ref))
            for ref, n in rows:
                counts.setdefault(ref, [0, 0, 0, 0])[i] = n
        inputs = conn.execute(
            select(TASKS.c.run_ref, func.count())
            .join(INPUTS, INPUTS.c.task_ref == TASKS.c.ref)
            .group_by(TASKS.c.run_ref)
        )
        for ref, n in inputs:
            counts.setdefault(ref, [0, 0, 0, 0])[2] = n
        for ref, n in conn.execute(
            select(EVENTS.c.run_ref, func.count()).group_by(EVENTS.c.run_ref)
        ):
            counts.setdefault(ref, [0, 0, 0, 0])[3] = n
    return {ref: (c[0], c[1], c[2], c[3]) for ref, c in counts.items()}


def runs_left(ledger: Ledger) -> int:
    with ledger._read() as conn:
        return int(conn.execute(select(func.count()).select_from(RUNS)).scalar() or 0)


def test_sigkill_mid_prune_leaves_every_run_whole_or_gone(db_url: str) -> None:
    ledger = Ledger.open(db_url, clock=FakeClock(LONG_AGO_MS))
    try:
        live = seed(ledger.for_principal(PRINCIPAL))
        before = shape(ledger)
        total = len(before)
        command = [
            sys.executable,
            "-m",
            "bridge.cli",
            "--db",
            db_url,
            "--principal",
            PRINCIPAL,
            "prune",
            "--older-than-days",
            "1",
            "--batch",
            "7",
        ]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while runs_left(ledger) == total:  # the first batches committed: kill it mid-way
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the prune never removed a run"
                time.sleep(0.005)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=DEADLINE_S)
        assert proc.returncode == -signal.SIGKILL
        after = shape(ledger)
        assert live <= set(after), "a live run was removed"
        assert 0 < total - len(after) < FINISHED, "killed before its end, after its start"
        for ref, counts in after.items():
            assert before.get(ref) == counts, f"run {ref} is half-deleted"
        # A later prune takes the rest, and still nothing live.
        rest = subprocess.run(command, capture_output=True, timeout=DEADLINE_S, check=True)
        assert rest.returncode == 0
        assert set(shape(ledger)) == live
    finally:
        ledger.close()
