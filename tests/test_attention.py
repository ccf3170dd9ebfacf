"""The attention query on SQLite and PostgreSQL: each kind appears, oldest first, with its
next step, and leaves once acted upon (answered, resolved, acknowledged, closed); the actions
are recorded as events, name who acted, and closing an orphaned run leaves its tasks alone."""

from __future__ import annotations

import pytest

from bridge import events as ev
from bridge._display import worded
from bridge._errors import InvalidTransition, NotFound
from bridge._ledger.reads.attention import AttentionWindow
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import Admission, LostReason, OuterStatus, TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import ENDPOINT, new_run, new_task

P = "acme"
HOUR = 3_600_000
QUESTION = {
    "message": "Approve 120 EUR?",
    "requestedSchema": {
        "type": "object",
        "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}},
        "required": ["approve"],
    },
}


def _kinds(tenant: TenantLedger, clock: FakeClock, **window: int) -> list[tuple[str, str]]:
    return [(i.kind, i.ref) for i in tenant.attention.attention(AttentionWindow(clock(), **window))]


def _ask(tenant: TenantLedger, task_ref: str, key: str = "confirm") -> str:
    tenant.tasks.observe_task(
        task_ref,
        TaskObservation(
            TaskStatus.INPUT_REQUIRED,
            input_requests={key: {"method": "elicitation/create", "params": QUESTION}},
        ),
    )
    return tenant.reads.input_requests(task_ref, pending_only=True)[0].ref


def test_each_kind_appears_oldest_first_then_leaves_once_acted_upon(
    ledger: Ledger, clock: FakeClock
) -> None:
    tenant = ledger.for_principal(P)
    run = new_run(tenant, response_id="resp_att1")
    waiting = new_task(tenant, run.ref, tool="approve_payment")
    input_ref = _ask(tenant, waiting.ref)
    clock.advance(1_000)
    op = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, server_name="pay", tool_name="charge", arguments={}
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.mark_dispatch_unknown(op.ref, "connection reset before a reply")
    clock.advance(1_000)
    lost = new_task(tenant, run.ref, tool="render_chart")
    tenant.tasks.mark_task_lost(lost.ref, LostReason.NOT_FOUND, "tasks/get answered -32602")
    clock.advance(1_000)
    done = new_task(tenant, run.ref)
    tenant.tasks.observe_task(
        done.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": []})
    )
    tenant.tasks.observe_task(done.ref, TaskObservation(TaskStatus.WORKING))  # regression: anomaly
    anomaly_seq = next(e.seq for e in tenant.reads.events(run.ref) if isinstance(e, ev.Anomaly))
    anomaly = f"{run.ref}:{anomaly_seq}"

    items = [worded(fact) for fact in tenant.attention.attention(AttentionWindow(clock()))]
    assert [(i.kind, i.ref) for i in items] == [
        ("input_waiting", input_ref),
        ("unknown_outcome", op.ref),
        ("lost_task", lost.ref),
        ("anomaly", anomaly),
    ]
    asked = items[0]
    assert asked.question == "Approve 120 EUR?" and asked.fields == ("approve", "note")
    assert asked.run_ref == run.ref and asked.response_id == "resp_att1"
    assert asked.task_ref == waiting.ref and "bridge answer" in asked.next_step
    assert "bridge resolve" in items[1].next_step and "bridge ack" in items[2].next_step
    # The ledger gives facts only; the wording is the display layer's (bridge._display).
    assert not hasattr(tenant.attention.attention(AttentionWindow(clock()))[0], "summary")
    assert asked.summary.endswith("approve_payment asks (elicitation/create): Approve 120 EUR?")
    assert asked.next_step.endswith(
        f"{input_ref} --accept approve=… --accept note=… (or --decline)"
    )
    assert items[1].summary == "pay.charge: connection reset before a reply"
    assert "render_chart lost (not_found: tasks/get answered -32602)" in items[2].summary
    assert items[3].next_step == f"read it (bridge show {run.ref}), then: bridge ack {anomaly}"

    # Waiting past the threshold: overdue (the same request, another kind).
    clock.advance(HOUR)
    overdue = _kinds(tenant, clock)
    assert ("input_overdue", input_ref) in overdue and ("input_waiting", input_ref) not in overdue
    # The run is as silent, but it waits on a person (a harness alive and waiting records
    # nothing either): it is listed by those items, not as orphaned.
    assert ("orphaned_run", run.ref) not in overdue

    tenant.inputs.record_input_answer(waiting.ref, input_ref, {"action": "accept", "content": {}})
    tenant.calls.record_admission(op.ref, Admission.UNKNOWN, "host", "alice")  # not final: stays
    assert ("unknown_outcome", op.ref) in _kinds(tenant, clock)
    verdict = tenant.calls.record_admission(op.ref, Admission.ADMITTED, "host", "alice")
    assert verdict.by == "alice"
    acked = tenant.operator.acknowledge(lost.ref, "alice", "checked: never charged")
    assert acked.task_ref == lost.ref and acked.by == "alice"
    tenant.operator.acknowledge(anomaly, "bob")
    assert _kinds(tenant, clock) == []  # acting on the run is news of it too
    clock.advance(HOUR)
    assert _kinds(tenant, clock) == [("orphaned_run", run.ref)]

    with pytest.raises(InvalidTransition, match="already acknowledged by alice"):
        tenant.operator.acknowledge(lost.ref, "bob")
    with pytest.raises(InvalidTransition, match="not lost"):
        tenant.operator.acknowledge(done.ref, "bob")
    with pytest.raises(NotFound):
        tenant.operator.acknowledge(f"{run.ref}:1", "bob")  # seq 1 is no anomaly
    assert ledger.for_principal("globex").attention.attention(AttentionWindow(clock(), 0, 0)) == []


def test_closing_an_orphaned_run_leaves_its_inner_tasks_alone(
    ledger: Ledger, clock: FakeClock
) -> None:
    tenant = ledger.for_principal(P)
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    clock.advance(10_000)
    assert _kinds(tenant, clock, orphan_after_ms=5_000) == [("orphaned_run", run.ref)]
    assert _kinds(tenant, clock, orphan_after_ms=20_000) == []
    with pytest.raises(InvalidTransition, match="not an end state"):
        tenant.operator.close_run(run.ref, OuterStatus.IN_PROGRESS, "harness gone", "alice")
    with pytest.raises(InvalidTransition, match="reason"):
        tenant.operator.close_run(run.ref, OuterStatus.FAILED, " ", "alice")
    closed = tenant.operator.close_run(
        run.ref, OuterStatus.FAILED, "harness host decommissioned", "alice"
    )
    assert closed.open_task_refs == [task.ref] and closed.by == "alice"
    assert tenant.reads.get_run(run.ref).status is OuterStatus.FAILED
    after = tenant.reads.get_task(task.ref)
    assert after.is_open and after.status is TaskStatus.WORKING
    assert after.cancel_requested_at_ms is None and after.next_poll_due_ms is not None
    assert _kinds(tenant, clock, orphan_after_ms=0) == []
    with pytest.raises(InvalidTransition, match="not in_progress"):
        tenant.operator.close_run(run.ref, OuterStatus.CANCELLED, "again", "alice")
    types = [e.type for e in tenant.reads.events(run.ref)][-3:]
    assert types == ["outer.status_changed", "outer.terminal", "outer.closed_by_operator"]


def test_a_remotely_followed_run_is_never_orphaned_nor_closed_here(
    ledger: Ledger, clock: FakeClock
) -> None:
    tenant = ledger.for_principal(P)
    run = tenant.runs.open_run(
        "http://127.0.0.1:9", response_id="resp_remote", status=OuterStatus.IN_PROGRESS
    )
    clock.advance(HOUR)
    assert _kinds(tenant, clock, orphan_after_ms=0) == []
    with pytest.raises(InvalidTransition, match="its server reports its end"):
        tenant.operator.close_run(run.ref, OuterStatus.FAILED, "gone", "alice")
