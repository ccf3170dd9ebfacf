"""On SQLite a task read and a run's events read go through the driver cursor the thread holds
for its call-path writes (``bridge._ledger.reads.lean_reads``): they must give what Core gives."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import event

from bridge import events as ev
from bridge._errors import NotFound
from bridge._ledger.commit.driver_sessions import SqliteDriverSession
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import new_run, new_task


def _holds_cursor(ledger: Ledger) -> bool:
    driver = ledger._driver
    assert isinstance(driver, SqliteDriverSession)
    return driver.held_cursor() is not None


def test_lean_task_and_event_reads_equal_core(tmp_path: Path, clock: FakeClock) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db", clock=clock, max_outcome_bytes=64)
    try:
        assert ledger.lean_reads is not None
        tenant = ledger.for_principal("local:alice")
        run = new_run(tenant)
        task = new_task(tenant, run.ref)  # a call-path write: this thread now holds a cursor
        assert _holds_cursor(ledger)
        assert tenant.reads.get_task(task.ref) == tenant.reads._core_task(task.ref)
        big = {"content": [{"type": "text", "text": "x" * 500}], "isError": False}
        tenant.tasks.observe_task(task.ref, TaskObservation(TaskStatus.COMPLETED, result=big))
        lean = tenant.reads.get_task(task.ref)
        assert lean == tenant.reads._core_task(task.ref)
        assert lean.outcome_truncated is True and not lean.is_open
        for after in (0, 2):
            params = {"w_principal": tenant.principal, "w_ref": run.ref, "w_after": after}
            core = [ev.parse_event(text) for text in tenant.reads._core_payloads(params, None)]
            assert core and tenant.reads.events(run.ref, after_seq=after) == core
            assert tenant.reads.events(run.ref, after_seq=after, limit=2) == core[:2]
        with pytest.raises(NotFound):
            tenant.reads.get_task("task_nope")
        other = ledger.for_principal("local:bob")  # the principal filter holds on this path
        with pytest.raises(NotFound):
            other.reads.get_task(task.ref)
        assert other.reads.events(run.ref) == []
    finally:
        ledger.close()


def test_a_thread_without_a_cursor_reads_through_core(sqlite_ledger: Ledger) -> None:
    """Reads alone never make a thread keep a pooled connection."""
    ledger = sqlite_ledger
    tenant = ledger.for_principal("local:alice")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    seen: list[object] = []

    def read() -> None:
        seen.append(tenant.reads.get_task(task.ref))
        seen.append(tenant.reads.events(run.ref))
        seen.append(_holds_cursor(ledger))

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=60)
    assert seen == [tenant.reads.get_task(task.ref), tenant.reads.events(run.ref), False]


def test_run_work_is_the_separate_reads_in_one(sqlite_ledger: Ledger) -> None:
    """``run_work`` (the final summary's reads) gives what the three separate reads give, and
    counts only this run's unanswered input requests."""
    ledger = sqlite_ledger
    tenant = ledger.for_principal("local:alice")
    asking = TaskObservation(
        TaskStatus.INPUT_REQUIRED,
        input_requests={"k": {"method": "elicitation/create", "params": {}}},
    )
    run, elsewhere = new_run(tenant), new_run(tenant)
    for ref in (run.ref, run.ref, elsewhere.ref):
        tenant.tasks.observe_task(new_task(tenant, ref).ref, asking)
    new_task(tenant, run.ref)  # one without input requests
    tasks, dispatches, pending = tenant.reads.run_work(run.ref)
    assert tasks == tenant.reads.list_tasks(run_ref=run.ref) and len(tasks) == 3
    assert dispatches == tenant.reads.list_dispatches(run_ref=run.ref) and len(dispatches) == 3
    separate = sum(len(tenant.reads.input_requests(t.ref, pending_only=True)) for t in tasks)
    assert pending == separate == 2
    assert ledger.for_principal("local:bob").reads.run_work(run.ref) == ([], [], 0)


def test_open_run_returns_the_committed_run(sqlite_ledger: Ledger) -> None:
    """``open_run`` reads its run back inside its own transaction: what a later read gives."""
    ledger = sqlite_ledger
    tenant = ledger.for_principal("local:alice")
    opened = new_run(tenant)
    assert opened == tenant.reads.get_run(opened.ref) and opened.event_count == 1


def test_lean_run_reads_equal_core(tmp_path: Path, clock: FakeClock) -> None:
    """A run's tasks and dispatches, a dispatch by operation id and the summary's reads give on
    the lean path what a thread without a cursor reads through Core: booleans, truncated
    outcomes, open and settled tasks alike."""
    ledger = Ledger.open(tmp_path / "ledger.db", clock=clock, max_outcome_bytes=64)
    try:
        tenant = ledger.for_principal("local:alice")
        run = new_run(tenant)
        settled, waiting = new_task(tenant, run.ref), new_task(tenant, run.ref)
        big = {"content": [{"type": "text", "text": "x" * 500}], "isError": False}
        tenant.tasks.observe_task(settled.ref, TaskObservation(TaskStatus.COMPLETED, result=big))
        asking = {"k": {"method": "elicitation/create", "params": {}}}
        tenant.tasks.observe_task(
            waiting.ref, TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests=asking)
        )
        op = tenant.calls.begin_dispatch(
            run.ref, server_endpoint="e", tool_name="t", arguments={}, operation_id="op-1"
        )
        tenant.calls.mark_dispatch_sent(op.ref)
        tenant.calls.record_immediate_result(op.ref, big)
        assert _holds_cursor(ledger)

        def reads() -> list[object]:
            return [
                tenant.reads.run_work(run.ref),
                tenant.reads.list_tasks(run_ref=run.ref, open_only=True),
                tenant.reads.list_tasks(),
                tenant.reads.list_dispatches(run_ref=run.ref),
                tenant.reads.list_dispatches(),
                tenant.reads.find_dispatch("op-1"),
                tenant.reads.find_dispatch("op-none"),
            ]

        through_sqlalchemy: list[str] = []
        listener = lambda *args: through_sqlalchemy.append(args[2])  # noqa: E731 (the SQL)
        event.listen(ledger.engine, "before_cursor_execute", listener)
        lean = reads()
        assert through_sqlalchemy == []  # all on this thread's driver cursor
        through_core: list[object] = []
        reader = threading.Thread(
            target=lambda: through_core.extend([reads(), _holds_cursor(ledger)])
        )
        reader.start()
        reader.join(timeout=60)
        event.remove(ledger.engine, "before_cursor_execute", listener)
        assert through_sqlalchemy  # the thread without a cursor read through Core...
        assert through_core == [lean, False]  # ...the same, and kept no connection for it
        tasks, dispatches, pending = lean[0]  # type: ignore[misc]
        assert len(tasks) == 2 and len(dispatches) == 3 and pending == 1
        assert [t.ref for t in lean[1]] == [waiting.ref]  # type: ignore[attr-defined]
        found = lean[5]
        assert found is not None and found.result_truncated is True  # type: ignore[attr-defined]
        assert ledger.for_principal("local:bob").reads.run_work(run.ref) == ([], [], 0)
    finally:
        ledger.close()
