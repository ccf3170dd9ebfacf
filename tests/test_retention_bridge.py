"""Retention from a running bridge: ``Bridge.prune`` and the scheduled pruner, one per ledger."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from bridge import Bridge, BridgeSettings, RetentionPolicy
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus, TaskStatus
from bridge._runtime.pruner import ScheduledPruner
from bridge.errors import BridgeError
from tests.conftest import FakeClock
from tests.support.builders import new_run, new_task

LONG_AGO_MS = 1_600_000_000_000
DEADLINE_S = 30.0


def seed(db: Path, principal: str, finished: int) -> str:
    """``finished`` completed runs long ago, and one open run (its reference)."""
    ledger = Ledger.open(db, clock=FakeClock(LONG_AGO_MS))
    try:
        tenant = ledger.for_principal(principal)
        for _ in range(finished):
            run = new_run(tenant)
            task = new_task(tenant, run.ref)
            tenant.tasks.observe_task(task.ref, TaskObservation(TaskStatus.COMPLETED, result={}))
            tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)
        return new_run(tenant).ref
    finally:
        ledger.close()


def refs(db: Path, principal: str) -> set[str]:
    ledger = Ledger.open(db)
    try:
        return {r.ref for r in ledger.for_principal(principal).reads.list_runs(limit=1000)}
    finally:
        ledger.close()


@pytest.mark.anyio
async def test_bridge_prune_needs_a_policy_and_stays_in_scope(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    open_run = seed(db, "acme", 5)
    settings = BridgeSettings(ledger_url=db, principals=["acme"], recover_on_start=False)
    async with Bridge.open(settings) as bridge:
        with pytest.raises(BridgeError, match="no retention policy"):
            await bridge.prune("acme")
        with pytest.raises(BridgeError, match="not in this bridge's scope"):
            await bridge.prune("globex", policy=RetentionPolicy())
        dry = await bridge.prune("acme", policy=RetentionPolicy(), dry_run=True)
        assert dry.runs == 5 and dry.rows == {}
        report = await bridge.prune("acme", policy=RetentionPolicy(batch_runs=2))
        assert report.runs == 5 and report.batches == 3
    assert refs(db, "acme") == {open_run}


@pytest.mark.anyio
async def test_a_running_bridge_prunes_on_its_schedule(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    open_run = seed(db, "acme", 6)
    other_open = seed(db, "globex", 3)
    retention = {"acme": RetentionPolicy(max_age_days=30, every_s=3600)}
    settings = BridgeSettings(ledger_url=db, principals=["acme", "globex"], retention=retention)
    async with Bridge.open(settings):
        deadline = time.monotonic() + DEADLINE_S
        while refs(db, "acme") != {open_run}:
            assert time.monotonic() < deadline, "the scheduled prune never ran"
            await anyio.sleep(0.05)
    assert len(refs(db, "globex")) == 4 and other_open in refs(db, "globex")  # no policy: kept


@pytest.mark.anyio
async def test_one_pruner_per_ledger_per_period(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    seed(db, "acme", 4)
    first, second = Ledger.open(db), Ledger.open(db)
    try:
        policy = RetentionPolicy(every_s=3600)
        a = ScheduledPruner(first, policy, ["acme"])
        b = ScheduledPruner(second, policy, ["acme"])
        ran = await a.round()
        assert ran is not None and ran[0].runs == 4
        assert await b.round() is None  # done this period, by another process
        assert await a.round() is None
    finally:
        first.close()
        second.close()


def test_a_held_job_lease_is_not_taken(tmp_path: Path) -> None:
    from bridge._ledger.coordination.job_lease import JobLease

    db = tmp_path / "ledger.db"
    Ledger.open(db).close()
    first, second = Ledger.open(db), Ledger.open(db)
    try:
        a = JobLease(first, "prune", "a", lease_ms=60_000)
        b = JobLease(second, "prune", "b", lease_ms=60_000)
        assert a.take(every_ms=0) and not b.take(every_ms=0)
        assert a.renew() and not b.renew()
        a.release()
        assert b.take(every_ms=0) and not a.renew()
        b.finish()
        assert not a.take(every_ms=3_600_000) and a.take(every_ms=0)
    finally:
        first.close()
        second.close()
