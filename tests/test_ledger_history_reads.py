"""The operator's and recovery's reads cost the same however long the history (issue 50).

Measured as work, not time: SQLite's virtual-machine instructions (a progress handler counts
them) for the same reads on the same live runs, before and after a history of finished runs
is added beside them. A read that walked the history (a scan of every task or input of the
principal) would grow with it; one that reads through the partial indexes of the open, lost
and waiting rows does not. The same holds for a history of *resolved* items, kept until a
prune removes their runs: calls of unknown outcome given a final verdict, lost tasks
acknowledged.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from bridge._ledger.reads.attention import AttentionWindow
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.retention.selection import unresolved_runs
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import Admission, CallState, LostReason, OuterStatus, TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import ENDPOINT, new_run, new_task

HISTORY = 300
STEP = 10  # instructions per progress-handler call


def _ask(tenant: TenantLedger, task_ref: str) -> str:
    asks = {"k": {"method": "elicitation/create", "params": {"message": "Which quarter?"}}}
    tenant.tasks.observe_task(
        task_ref, TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests=asks)
    )
    (request,) = [r for r in tenant.reads.pending_input_requests() if r.task_ref == task_ref]
    assert request.ref is not None
    return request.ref


def _live(tenant: TenantLedger) -> None:
    """What waits for a person: a waiting input, a lost task, a task working, a call out."""
    _ask(tenant, new_task(tenant, new_run(tenant).ref).ref)
    lost = new_task(tenant, new_run(tenant).ref)
    tenant.tasks.mark_task_lost(lost.ref, LostReason.NOT_FOUND, "gone")
    new_task(tenant, new_run(tenant).ref)
    op = tenant.calls.begin_dispatch(
        new_run(tenant).ref,
        server_endpoint=ENDPOINT,
        server_name="reports",
        tool_name="t",
        arguments={"n": 1},
    )
    tenant.calls.mark_dispatch_sent(op.ref)


def _finished(tenant: TenantLedger) -> None:
    """A finished run as a healthy history holds thousands: an input asked and answered, a
    task completed, a call answered at once, the run completed."""
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    tenant.inputs.record_input_answer(task.ref, _ask(tenant, task.ref), {"action": "accept"})
    tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": []})
    )
    op = tenant.calls.begin_dispatch(
        run.ref,
        server_endpoint=ENDPOINT,
        server_name="reports",
        tool_name="quick",
        arguments={"n": secrets.token_hex(4)},
        sent=True,
    )
    tenant.calls.record_immediate_result(op.ref, {"content": []}, intent=op)
    tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)


def _resolved(tenant: TenantLedger) -> str:
    """A finished run whose items once waited for a person and were acted on: a call of
    unknown outcome resolved as never run, a lost task acknowledged."""
    run = new_run(tenant)
    op = tenant.calls.begin_dispatch(
        run.ref,
        server_endpoint=ENDPOINT,
        server_name="reports",
        tool_name="t",
        arguments={"n": secrets.token_hex(4)},
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.mark_dispatch_unknown(op.ref, "no reply")
    tenant.calls.record_admission(op.ref, Admission.NOT_ADMITTED, "host")
    lost = new_task(tenant, run.ref)
    tenant.tasks.mark_task_lost(lost.ref, LostReason.NOT_FOUND, "gone")
    tenant.operator.acknowledge(lost.ref, by="ops")
    tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)
    return run.ref


@contextmanager
def _counting(ledger: Ledger) -> Iterator[list[int]]:
    """Counts (in ``STEP`` instructions) of the SQLite work done while the block runs."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    def on_execute(conn: Any, *_: Any) -> None:
        conn.connection.driver_connection.set_progress_handler(tick, STEP)

    event.listen(ledger.engine, "before_cursor_execute", on_execute)
    try:
        yield steps
    finally:
        event.remove(ledger.engine, "before_cursor_execute", on_execute)


def _work(ledger: Ledger, read: Callable[[], object]) -> int:
    read()  # warm: statements compiled, pages cached
    with _counting(ledger) as steps:
        read()
    return steps[0]


def test_attention_and_recovery_reads_do_not_grow_with_the_history(
    sqlite_ledger: Ledger, clock: FakeClock
) -> None:
    tenant = sqlite_ledger.for_principal("acme")
    _live(tenant)
    window = AttentionWindow(now_ms=clock.now_ms)

    def attention() -> object:
        items = tenant.attention.attention(window)
        assert {i.kind for i in items} == {"input_waiting", "lost_task"}
        return items

    def recovery() -> object:
        return (
            tenant.reads.list_tasks(open_only=True),
            tenant.reads.list_runs(open_only=True, limit=10_000),
            tenant.reads.pending_input_requests(),
            tenant.rounds.pending_call_inputs(),
            tenant.reads.list_dispatches(states=[CallState.PENDING, CallState.SENT]),
        )

    reads = {"attention": attention, "recovery": recovery}
    before = {name: _work(sqlite_ledger, read) for name, read in reads.items()}
    for _ in range(HISTORY):
        _finished(tenant)
    after = {name: _work(sqlite_ledger, read) for name, read in reads.items()}
    for name in reads:
        # A read walking the history would do about HISTORY times more per row it skips.
        assert after[name] <= before[name] * 1.2 + 5, (name, before[name], after[name])


def test_attention_does_not_read_resolved_items_of_the_history(
    sqlite_ledger: Ledger, clock: FakeClock
) -> None:
    tenant = sqlite_ledger.for_principal("acme")
    _live(tenant)
    window = AttentionWindow(now_ms=clock.now_ms)

    def attention() -> object:
        items = tenant.attention.attention(window)
        assert {i.kind for i in items} == {"input_waiting", "lost_task"}
        return items

    before = _work(sqlite_ledger, attention)
    resolved = [_resolved(tenant) for _ in range(HISTORY)]
    after = _work(sqlite_ledger, attention)
    # Reading every resolved call and lost task (and their verdicts and acknowledgements from
    # the events) would do several times the work; open work alone stays the same.
    assert after <= before * 1.2 + 5, (before, after)
    with sqlite_ledger.engine.connect() as conn:  # what a prune asks of a batch of runs
        assert unresolved_runs(conn, "acme", resolved[:50]) == set()
