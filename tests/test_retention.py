"""Retention: a prune removes finished runs whole, and never a live or unresolved one; the
archive it writes restores the runs' reads in an empty ledger (both backends)."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bridge._errors import NotFound
from bridge._ledger._base import EVENTS, RUNS
from bridge._ledger.reads.attention import AttentionWindow
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.retention.policy import DAY_MS, RetentionPolicy, policy_for
from bridge._ledger.retention.prune import Prune, PruneReport
from bridge._ledger.retention.restore import import_archive
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import Admission, LostReason, OuterStatus, TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import new_run, new_task

POLICY = RetentionPolicy(max_age_days=7, min_age_days=1, batch_runs=3)


def finished_run(tenant: TenantLedger, *, task_id: str | None = None) -> str:
    """A completed run with one completed task (the server's text quotes the raw task id)."""
    run = new_run(tenant)
    task = new_task(tenant, run.ref, task_id=task_id)
    raw = task_id or "?"
    result = {"content": [{"type": "text", "text": f"report of {raw} ready"}]}
    tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, result=result, status_message=f"{raw} done")
    )
    tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)
    return run.ref


def prune(
    ledger: Ledger,
    principal: str,
    policy: RetentionPolicy = POLICY,
    *,
    dry_run: bool = False,
    archive: Path | None = None,
) -> PruneReport:
    job = Prune(ledger, principal, policy, dry_run=dry_run, archive=archive)
    while job.step():
        pass
    return job.report


def run_refs(tenant: TenantLedger) -> set[str]:
    return {r.ref for r in tenant.reads.list_runs(limit=10_000)}


def test_policy_defaults_and_per_principal() -> None:
    default = RetentionPolicy()
    assert (default.max_age_days, default.keep_runs, default.min_age_days) == (30.0, None, 1.0)
    assert policy_for(None, "acme") is None
    assert policy_for(default, "acme") is default
    assert policy_for({"acme": POLICY}, "acme") is POLICY
    assert policy_for({"acme": POLICY}, "other") is None
    with pytest.raises(ValueError):
        RetentionPolicy(keep_runs=-1)
    with pytest.raises(ValueError):
        RetentionPolicy(min_age_days=-1)
    with pytest.raises(ValueError):
        RetentionPolicy(pause_ratio=-0.5)


def test_the_pause_between_batches_follows_the_batches_own_time(
    ledger: Ledger, clock: FakeClock
) -> None:
    """A batch slowed down (a loaded machine, a busy database) is followed by a pause at least
    as long (``pause_ratio`` times it): the prune's share of the ledger stays bounded."""
    assert RetentionPolicy().pause_after(0.0) == 0.02
    assert RetentionPolicy().pause_after(0.5) == 1.5
    assert RetentionPolicy(pause_ratio=1).pause_after(0.5) == 0.5
    tenant = ledger.for_principal("acme")
    for _ in range(4):
        finished_run(tenant)
    clock.now_ms += 8 * DAY_MS
    no_floor = RetentionPolicy(
        max_age_days=7, min_age_days=1, batch_runs=3, pause_s=0, pause_ratio=1
    )
    job = Prune(ledger, "acme", no_floor)
    assert job.pause_s == 0  # no batch yet
    started = time.monotonic()
    assert job.step()
    took = time.monotonic() - started
    if ledger.dialect.name == "postgresql":
        assert 0 < job.pause_s <= took  # the batch's own time
    else:
        assert job.pause_s == 0  # SQLite: the write lock takes turns, the fixed pause alone


def test_prune_removes_old_finished_runs_whole(ledger: Ledger, clock: FakeClock) -> None:
    tenant = ledger.for_principal("acme")
    old = [finished_run(tenant) for _ in range(5)]
    clock.advance(8 * DAY_MS)
    young = finished_run(tenant)
    report = prune(ledger, "acme")
    assert report.runs == 5 and report.batches >= 2
    assert run_refs(tenant) == {young}
    assert report.rows["bridge_outer_responses"] == 5
    assert report.rows["bridge_inner_tasks"] == 5
    assert report.rows["bridge_events"] > 5
    for ref in old:
        with pytest.raises(NotFound):
            tenant.reads.get_run(ref)
    with ledger._read() as conn:
        left = conn.execute(
            select(func.count()).select_from(EVENTS).where(EVENTS.c.run_ref.in_(old))
        ).scalar()
    assert left == 0


def test_dry_run_removes_nothing(ledger: Ledger, clock: FakeClock) -> None:
    tenant = ledger.for_principal("acme")
    refs = {finished_run(tenant) for _ in range(4)}
    clock.advance(8 * DAY_MS)
    report = prune(ledger, "acme", dry_run=True)
    assert report.dry_run and report.runs == 4 and set(report.sample) == refs
    assert report.rows == {}
    assert run_refs(tenant) == refs


def test_count_bound_keeps_the_newest(ledger: Ledger, clock: FakeClock) -> None:
    tenant = ledger.for_principal("acme")
    refs = []
    for _ in range(6):
        refs.append(finished_run(tenant))
        clock.advance(1_000)
    clock.advance(2 * DAY_MS)
    report = prune(ledger, "acme", RetentionPolicy(max_age_days=None, keep_runs=2))
    assert report.runs == 4
    assert run_refs(tenant) == set(refs[-2:])


def test_min_age_wins_over_the_count(ledger: Ledger, clock: FakeClock) -> None:
    tenant = ledger.for_principal("acme")
    refs = {finished_run(tenant) for _ in range(3)}
    report = prune(ledger, "acme", RetentionPolicy(max_age_days=0, keep_runs=0))
    assert report.runs == 0 and run_refs(tenant) == refs


def test_live_and_unresolved_runs_stay(ledger: Ledger, clock: FakeClock) -> None:
    tenant = ledger.for_principal("acme")
    open_run = new_run(tenant).ref  # in progress
    ended_with_open_task = new_run(tenant)
    new_task(tenant, ended_with_open_task.ref)
    tenant.runs.observe_outer(ended_with_open_task.ref, OuterStatus.COMPLETED)
    lost = new_run(tenant)
    lost_task = new_task(tenant, lost.ref)
    tenant.tasks.mark_task_lost(lost_task.ref, LostReason.NOT_FOUND, "gone")
    tenant.runs.observe_outer(lost.ref, OuterStatus.FAILED)
    unknown = new_run(tenant)
    op = tenant.calls.begin_dispatch(
        unknown.ref,
        server_endpoint="http://127.0.0.1:9/mcp",
        server_name="reports",
        tool_name="pay",
        arguments={},
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.mark_dispatch_unknown(op.ref, "connection dropped")
    tenant.runs.observe_outer(unknown.ref, OuterStatus.FAILED)
    resolved = new_run(tenant)
    op2 = tenant.calls.begin_dispatch(
        resolved.ref,
        server_endpoint="http://127.0.0.1:9/mcp",
        server_name="reports",
        tool_name="pay",
        arguments={},
    )
    tenant.calls.mark_dispatch_sent(op2.ref)
    tenant.calls.mark_dispatch_unknown(op2.ref, "connection dropped")
    tenant.calls.record_admission(op2.ref, Admission.UNKNOWN, "host")
    tenant.calls.record_admission(op2.ref, Admission.NOT_ADMITTED, "host")
    tenant.runs.observe_outer(resolved.ref, OuterStatus.FAILED)
    in_flight = new_run(tenant)
    op3 = tenant.calls.begin_dispatch(
        in_flight.ref,
        server_endpoint="http://127.0.0.1:9/mcp",
        server_name="reports",
        tool_name="pay",
        arguments={},
    )
    tenant.calls.mark_dispatch_sent(op3.ref)
    tenant.runs.observe_outer(in_flight.ref, OuterStatus.CANCELLED)
    clock.advance(40 * DAY_MS)
    report = prune(ledger, "acme", RetentionPolicy(max_age_days=0, keep_runs=0, min_age_days=0))
    assert report.runs == 1 and report.sample == [resolved.ref]
    assert report.unresolved == 2  # the unknown call without a verdict, the lost task unseen
    assert run_refs(tenant) == {
        open_run,
        ended_with_open_task.ref,
        lost.ref,
        unknown.ref,
        in_flight.ref,
    }


def test_a_lost_task_holds_its_run_until_acknowledged(ledger: Ledger, clock: FakeClock) -> None:
    tenant = ledger.for_principal("acme")
    lost = new_run(tenant)
    lost_task = new_task(tenant, lost.ref)
    tenant.tasks.mark_task_lost(lost_task.ref, LostReason.NOT_FOUND, "gone")
    tenant.runs.observe_outer(lost.ref, OuterStatus.FAILED)
    clock.advance(40 * DAY_MS)
    policy = RetentionPolicy(max_age_days=0, keep_runs=0, min_age_days=0)
    report = prune(ledger, "acme", policy)
    assert report.runs == 0 and report.unresolved == 1
    assert run_refs(tenant) == {lost.ref}
    tenant.operator.acknowledge(lost_task.ref, by="oncall")
    clock.advance(40 * DAY_MS)
    report = prune(ledger, "acme", policy)
    assert report.runs == 1 and report.sample == [lost.ref]
    assert run_refs(tenant) == set()


def test_prune_is_scoped_to_its_principal(ledger: Ledger, clock: FakeClock) -> None:
    mine = finished_run(ledger.for_principal("acme"))
    theirs = finished_run(ledger.for_principal("globex"))
    clock.advance(8 * DAY_MS)
    assert prune(ledger, "acme").runs == 1
    assert run_refs(ledger.for_principal("acme")) == set()
    assert run_refs(ledger.for_principal("globex")) == {theirs}
    assert mine not in run_refs(ledger.for_principal("globex"))


def test_export_then_import_restores_reads(
    ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    tenant = ledger.for_principal("acme")
    raw_ids = [f"raw-task-{i}-secretish" for i in range(4)]
    refs = [finished_run(tenant, task_id=raw) for raw in raw_ids]
    before = {
        ref: (
            [e.model_dump() for e in tenant.reads.events(ref)],
            [t.status for t in tenant.reads.list_tasks(run_ref=ref)],
            [d.state for d in tenant.reads.list_dispatches(run_ref=ref)],
        )
        for ref in refs
    }
    clock.advance(8 * DAY_MS)
    archive = tmp_path / "acme.jsonl.gz"
    report = prune(ledger, "acme", archive=archive)
    assert report.runs == 4 and report.archived_bytes == archive.stat().st_size
    text = gzip.decompress(archive.read_bytes()).decode()
    assert not any(raw in text for raw in raw_ids)
    assert run_refs(tenant) == set()

    target = Ledger.open(tmp_path / "restored.db", clock=clock)
    try:
        restored = import_archive(target, "acme", archive)
        assert restored.runs == 4 and restored.skipped == 0
        again = import_archive(target, "acme", archive)
        assert again.runs == 0 and again.skipped == 4
        back = target.for_principal("acme")
        for ref in refs:
            events, statuses, states = before[ref]
            assert [e.model_dump() for e in back.reads.events(ref)] == events
            assert [t.status for t in back.reads.list_tasks(run_ref=ref)] == statuses
            assert [d.state for d in back.reads.list_dispatches(run_ref=ref)] == states
        assert run_refs(target.for_principal("globex")) == set()
    finally:
        target.close()


def test_postgres_prune_skips_a_run_a_live_writer_holds(
    pg_ledger: Ledger, clock: FakeClock
) -> None:
    """A replica writing to a run (its row locked) is never waited for: the prune passes over
    that run, finishes the rest at once, and takes it on a later prune."""
    tenant = pg_ledger.for_principal("acme")
    held, *_others = [finished_run(tenant) for _ in range(4)]
    clock.advance(8 * DAY_MS)
    with pg_ledger.engine.connect() as writer:
        with writer.begin():
            writer.execute(select(RUNS.c.ref).where(RUNS.c.ref == held).with_for_update())
            started = time.monotonic()
            report = prune(pg_ledger, "acme")
            assert time.monotonic() - started < 5.0
        assert report.runs == 3 and held not in report.sample
    assert run_refs(tenant) == {held}
    assert prune(pg_ledger, "acme").runs == 1


def test_a_runs_webhook_outbox_rows_go_with_it(ledger: Ledger, clock: FakeClock) -> None:
    """Every attention item has an outbox row, webhooks configured or not: a finished run's go
    with it (the foreign key to the run would refuse the delete otherwise)."""
    from sqlalchemy import insert

    from bridge._ledger.retention.removal import OUTBOX

    tenant = ledger.for_principal("acme")
    refs = [finished_run(tenant), finished_run(tenant)]
    with ledger.engine.begin() as conn:
        for n, (ref, due) in enumerate(zip(refs, (clock.now_ms, None), strict=True)):
            conn.execute(
                insert(OUTBOX).values(
                    id=f"wh_{n}", principal="acme", run_ref=ref, seq=10, kind="input_waiting",
                    created_at_ms=clock.now_ms, attempts=1, next_attempt_ms=due,
                )
            )  # fmt: skip
    clock.advance(8 * DAY_MS)
    report = prune(ledger, "acme")
    assert sorted(report.sample) == sorted(refs) and report.rows["bridge_webhook_outbox"] == 2
    with ledger._read() as conn:
        assert conn.execute(select(func.count()).select_from(OUTBOX)).scalar() == 0


def test_an_archive_from_before_resolved_columns_imports_resolved(
    ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    """An archive written before calls and tasks carried their verdict's and acknowledgement's
    time (migration 0015) restores them from its events: nothing resolved waits again."""
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    op = tenant.calls.begin_dispatch(
        run.ref,
        server_endpoint="http://127.0.0.1:9/mcp",
        server_name="r",
        tool_name="pay",
        arguments={},
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.mark_dispatch_unknown(op.ref, "connection dropped")
    tenant.calls.record_admission(op.ref, Admission.ADMITTED, "host")
    lost_task = new_task(tenant, run.ref)
    tenant.tasks.mark_task_lost(lost_task.ref, LostReason.NOT_FOUND, "gone")
    tenant.operator.acknowledge(lost_task.ref, by="oncall")
    tenant.runs.observe_outer(run.ref, OuterStatus.FAILED)
    clock.advance(40 * DAY_MS)
    archive = tmp_path / "acme.jsonl.gz"
    policy = RetentionPolicy(max_age_days=0, keep_runs=0, min_age_days=0)
    assert prune(ledger, "acme", policy, archive=archive).runs == 1
    older = tmp_path / "older.jsonl.gz"
    lines = gzip.decompress(archive.read_bytes()).decode().splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:  # as written before 0015: neither column in any row
        for column in ("resolved_at_ms", "acknowledged_at_ms"):
            record.get("row", {}).pop(column, None)
    older.write_bytes(gzip.compress("\n".join(map(json.dumps, records)).encode()))

    target = Ledger.open(tmp_path / "restored.db", clock=clock)
    try:
        assert import_archive(target, "acme", older).runs == 1
        back = target.for_principal("acme")
        assert back.attention.attention(AttentionWindow(clock.now_ms)) == []
        (call,) = [c for c in back.reads.list_dispatches(run_ref=run.ref) if c.ref == op.ref]
        assert call.state.value == "unknown"  # still what it was; only its verdict is final
    finally:
        target.close()
