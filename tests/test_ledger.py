"""The ledger's write-ahead paths, verdicts and bad inputs, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import insert

from bridge import events as ev
from bridge._errors import (
    ConflictingIds,
    DuplicateTaskHandle,
    InputAlreadyAnswered,
    InvalidTransition,
    NotFound,
    OperationReused,
    UnknownInputKey,
)
from bridge._ids import digest_arguments
from bridge._ledger.outcome import is_truncation_marker
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import RUNS, Ledger
from bridge._lifecycle import CallState, LostReason, OuterStatus, TaskStatus
from tests.conftest import FakeClock
from tests.support.builders import ENDPOINT, new_run, new_task
from tests.support.postgres import wait_for_lock_waiters

APPROVAL = {"method": "elicitation/create", "params": {"message": "Approve 120 EUR?"}}


def _types(ledger: Ledger, run_ref: str, principal: str = "acme") -> list[str]:
    return [e.type for e in ledger.for_principal(principal).reads.events(run_ref)]


def test_dispatch_write_ahead_path_links_task_to_outer_ids(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant, response_id="resp_abc", session_id="hsess_abc")
    op = tenant.calls.begin_dispatch(
        run.ref,
        server_endpoint=ENDPOINT,
        server_name="reports",
        tool_name="generate_report",
        arguments={"b": 1, "a": [1, 2]},
    )
    assert op.state is CallState.PENDING
    assert op.args_digest == digest_arguments({"a": [1, 2], "b": 1})  # key order irrelevant
    assert tenant.calls.mark_dispatch_sent(op.ref).state is CallState.SENT
    task = tenant.calls.record_task_created(
        op.ref, task_id="t-raw-1", status=TaskStatus.WORKING, ttl_ms=5_000, poll_interval_ms=250
    )
    assert (task.response_id, task.session_id, task.run_ref) == ("resp_abc", "hsess_abc", run.ref)
    assert tenant.reads.get_dispatch(op.ref).state is CallState.TASK
    assert tenant.reads.get_dispatch(op.ref).task_ref == task.ref
    assert task.next_poll_due_ms == ledger.clock()
    assert _types(ledger, run.ref) == ["run.registered", "task.created"]


def test_settled_dispatch_never_moves(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    op = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, tool_name="lookup", arguments={}
    )
    with pytest.raises(InvalidTransition):
        tenant.calls.record_immediate_result(op.ref, {"content": []})  # never sent
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.record_immediate_result(op.ref, {"content": [], "isError": True})
    with pytest.raises(InvalidTransition):
        tenant.calls.mark_dispatch_unknown(op.ref, "late timeout")
    with pytest.raises(InvalidTransition):
        tenant.calls.record_task_created(op.ref, task_id="x", status=TaskStatus.WORKING)
    stored = tenant.reads.get_dispatch(op.ref)
    assert stored.state is CallState.RESULT and stored.result["isError"] is True
    result_event = tenant.reads.events(run.ref)[-1]
    assert isinstance(result_event, ev.CallResult) and result_event.is_error


def test_unknown_outcome_is_an_explicit_event(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    op = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, tool_name="pay", arguments={}
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.mark_dispatch_unknown(op.ref, "read timeout after send")
    last = tenant.reads.events(run.ref)[-1]
    assert isinstance(last, ev.CallUnknownOutcome)
    assert last.previous is CallState.SENT and last.reason == "read timeout after send"
    assert tenant.reads.list_dispatches(states=[CallState.UNKNOWN])[0].ref == op.ref


def test_operation_id_makes_dispatch_idempotent_and_refuses_reuse(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    first = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, tool_name="pay", arguments={"n": 1}, operation_id="o1"
    )
    tenant.calls.mark_dispatch_sent(first.ref)
    again = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, tool_name="pay", arguments={"n": 1}, operation_id="o1"
    )
    assert again.ref == first.ref and again.state is CallState.SENT
    with pytest.raises(OperationReused):
        tenant.calls.begin_dispatch(
            run.ref,
            server_endpoint=ENDPOINT,
            tool_name="pay",
            arguments={"n": 2},
            operation_id="o1",
        )
    assert len(tenant.reads.list_dispatches(run_ref=run.ref)) == 1


def test_duplicate_task_handle_is_refused_and_recorded(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    held = new_task(tenant, run.ref, task_id="same-handle")
    op = tenant.calls.begin_dispatch(run.ref, server_endpoint=ENDPOINT, tool_name="t", arguments={})
    tenant.calls.mark_dispatch_sent(op.ref)
    with pytest.raises(DuplicateTaskHandle) as raised:
        tenant.calls.record_task_created(op.ref, task_id="same-handle", status=TaskStatus.WORKING)
    assert "same-handle" not in str(raised.value)
    anomaly = tenant.reads.events(run.ref)[-1]
    assert isinstance(anomaly, ev.Anomaly) and anomaly.kind == "duplicate_task_handle"
    assert held.ref in anomaly.detail and "same-handle" not in anomaly.detail
    assert tenant.reads.get_dispatch(op.ref).state is CallState.SENT  # nothing half-written


def test_input_requests_recorded_and_surfaced_once(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    waiting = TaskObservation(
        status=TaskStatus.INPUT_REQUIRED, input_requests={"approve": APPROVAL}
    )
    first = tenant.tasks.observe_task(task.ref, waiting)
    (input_ref,) = first.new_input_refs
    assert input_ref.startswith("in_")
    assert tenant.tasks.observe_task(task.ref, waiting).new_input_refs == ()
    tenant.inputs.record_input_answer(task.ref, input_ref, {"action": "accept"})
    # The server is eventually consistent: the answered key may still show on later polls.
    assert tenant.tasks.observe_task(task.ref, waiting).new_input_refs == ()
    with pytest.raises(InputAlreadyAnswered):
        tenant.inputs.record_input_answer(task.ref, "approve", {"action": "accept"})
    with pytest.raises(UnknownInputKey):
        tenant.inputs.record_input_answer(task.ref, "never-asked", {})
    surfaced = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskInputRequired)]
    assert len(surfaced) == 1
    assert surfaced[0].method == "elicitation/create" and surfaced[0].params == APPROVAL["params"]
    (request,) = tenant.reads.input_requests(task.ref)
    assert request.answered_at_ms is not None and request.surfaced_at_ms is not None
    assert tenant.reads.input_requests(task.ref, pending_only=True) == []


def test_an_observation_stores_everything_it_carries(ledger: Ledger, clock: FakeClock) -> None:
    """What a poll said is what a later read (another process, after a restart) finds."""
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    clock.advance(250)
    working = tenant.tasks.observe_task(
        task.ref,
        TaskObservation(
            status=TaskStatus.WORKING,
            status_message=f"{task.task_id} is at 40 %",
            server_updated_at="2026-12-02T08:00:00Z",
            poll_interval_ms=1_500,
            ttl_ms=90_000,
            next_poll_due_ms=clock.now_ms + 1_500,
        ),
    )
    read = tenant.reads.get_task(task.ref)
    assert working.task == read
    assert read.status is TaskStatus.WORKING
    assert read.status_message == f"[{task.ref}] is at 40 %"  # the raw id scrubbed
    assert read.server_updated_at == "2026-12-02T08:00:00Z"
    assert (read.poll_interval_ms, read.ttl_ms) == (1_500, 90_000)
    assert read.next_poll_due_ms == clock.now_ms + 1_500
    assert read.updated_at_ms == clock.now_ms
    clock.advance(250)
    result = {"content": [{"type": "text", "text": "done"}], "isError": False}
    done = tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, status_message="done", result=result)
    )
    read = tenant.reads.get_task(task.ref)
    assert done.task == read
    assert (read.status, read.status_message, read.result) == (TaskStatus.COMPLETED, "done", result)
    assert read.terminal_at_ms == clock.now_ms and read.next_poll_due_ms is None
    assert (read.poll_interval_ms, read.ttl_ms) == (1_500, 90_000)  # not said again: kept
    assert [type(e).__name__ for e in done.events] == ["TaskStatusChanged", "TaskTerminal"]
    assert _types(ledger, run.ref)[-2:] == ["task.status_changed", "task.terminal"]


def test_input_key_reused_for_a_different_request_is_an_anomaly_once(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    tenant.tasks.observe_task(
        task.ref, TaskObservation(status=TaskStatus.INPUT_REQUIRED, input_requests={"k": APPROVAL})
    )
    other = {"method": "elicitation/create", "params": {"message": "Approve 9,999 EUR?"}}
    for _ in range(3):
        tenant.tasks.observe_task(
            task.ref, TaskObservation(status=TaskStatus.INPUT_REQUIRED, input_requests={"k": other})
        )
    anomalies = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.Anomaly)]
    assert [a.kind for a in anomalies] == ["reused_input_key"]
    (request,) = tenant.reads.input_requests(task.ref)
    assert request.params == APPROVAL["params"]  # the first request is what stays on record


def test_terminal_result_is_stored_once_and_regressions_are_anomalies(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    result = {"content": [{"type": "text", "text": "done"}], "isError": False}
    outcome = tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, result=result)
    )
    assert outcome.task.result == result and not outcome.task.is_open
    assert outcome.task.next_poll_due_ms is None
    for late in (TaskStatus.WORKING, TaskStatus.FAILED):
        regression = tenant.tasks.observe_task(
            task.ref, TaskObservation(late, error={"code": -32603, "message": "x"})
        )
        assert regression.decision.is_anomaly
    again = tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": True})
    )
    assert again.task.result == result and again.task.status is TaskStatus.COMPLETED
    terminal_events = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskTerminal)]
    assert len(terminal_events) == 1 and terminal_events[0].result == result
    assert _types(ledger, run.ref).count("anomaly") == 2


def test_task_created_terminal_stays_due_until_its_result_is_stored(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    op = tenant.calls.begin_dispatch(run.ref, server_endpoint=ENDPOINT, tool_name="t", arguments={})
    tenant.calls.mark_dispatch_sent(op.ref)
    task = tenant.calls.record_task_created(op.ref, task_id="quick", status=TaskStatus.COMPLETED)
    assert task.is_open and [t.ref for t in tenant.reads.due_tasks(ledger.clock())] == [task.ref]
    done = tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": False})
    )
    assert not done.task.is_open and tenant.reads.due_tasks(ledger.clock()) == []


def test_completed_without_result_is_terminal_with_a_malformed_reply_anomaly(
    ledger: Ledger,
) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    outcome = tenant.tasks.observe_task(task.ref, TaskObservation(TaskStatus.COMPLETED))
    assert outcome.task.status is TaskStatus.COMPLETED and outcome.task.result is None
    kinds = [e.kind for e in outcome.events if isinstance(e, ev.Anomaly)]
    assert kinds == ["malformed_reply"]


def test_failed_task_keeps_its_error(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    error = {"code": -32603, "message": "renderer crashed"}
    outcome = tenant.tasks.observe_task(task.ref, TaskObservation(TaskStatus.FAILED, error=error))
    assert outcome.task.error == error and outcome.task.result is None


def test_large_outcome_is_replaced_by_an_explicit_truncation_marker(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    big = {"content": [{"type": "text", "text": "x" * 10_000}], "isError": False}
    outcome = tenant.tasks.observe_task(task.ref, TaskObservation(TaskStatus.COMPLETED, result=big))
    stored = outcome.task
    assert stored.outcome_truncated and is_truncation_marker(stored.result)
    assert stored.result["original_bytes"] == stored.outcome_bytes > 4096
    terminal = tenant.reads.events(run.ref)[-1]
    assert isinstance(terminal, ev.TaskTerminal) and terminal.truncated


def test_lost_verdict_then_real_terminal_supersedes_it(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    assert tenant.tasks.mark_task_lost(task.ref, LostReason.SERVER_GONE, "connection refused")
    assert not tenant.tasks.mark_task_lost(task.ref, LostReason.TTL_EXPIRED)  # only once
    lost = tenant.reads.get_task(task.ref)
    assert lost.lost_reason is LostReason.SERVER_GONE and lost.status is TaskStatus.WORKING
    assert not lost.is_open and tenant.reads.list_tasks(open_only=True) == []
    # A live status seen later is recorded, but the verdict stays.
    still = tenant.tasks.observe_task(task.ref, TaskObservation(TaskStatus.INPUT_REQUIRED))
    assert still.task.lost_reason is LostReason.SERVER_GONE
    done = tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.CANCELLED, status_message="stopped by operator")
    )
    assert done.task.lost_reason is None and done.task.status is TaskStatus.CANCELLED
    terminal = tenant.reads.events(run.ref)[-1]
    assert isinstance(terminal, ev.TaskTerminal) and terminal.superseded_lost
    assert not tenant.tasks.mark_task_lost(task.ref, LostReason.NOT_FOUND)  # terminal is final


def test_cancel_is_recorded_as_intent_only(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    assert tenant.tasks.record_cancel_requested(task.ref, "host")
    after = tenant.reads.get_task(task.ref)
    assert after.status is TaskStatus.WORKING and after.cancel_requested_at_ms is not None
    assert after.is_open  # an ack is not a stop: the handle is still watched
    tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": False})
    )
    assert not tenant.tasks.record_cancel_requested(task.ref, "host")


def test_outer_lifecycle_is_recorded_without_touching_inner_tasks(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    tenant.runs.observe_outer(run.ref, OuterStatus.CANCELLED, sequence=7)
    assert tenant.reads.get_task(task.ref).status is TaskStatus.WORKING
    assert tenant.reads.get_task(task.ref).is_open
    regression = tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)
    assert regression.is_anomaly
    stored = tenant.reads.get_run(run.ref)
    assert stored.status is OuterStatus.CANCELLED and stored.last_sequence == 7
    assert _types(ledger, run.ref)[-3:] == ["outer.status_changed", "outer.terminal", "anomaly"]


def test_a_response_is_registered_once_per_tenant_however_many_ask(ledger: Ledger) -> None:
    """Registration looks for the response inside its own write transaction: eight threads
    registering the same served response get one run, and another tenant's same response id
    is another run."""
    tenant = ledger.for_principal("acme")

    def register(_: int) -> str:
        return tenant.runs.open_run("local:h", response_id="resp_same", session_id="hsess1").ref

    with ThreadPoolExecutor(max_workers=8) as pool:
        refs = set(pool.map(register, range(8)))
    assert len(refs) == 1
    (ref,) = refs
    assert _types(ledger, ref) == ["run.registered"]
    assert tenant.runs.open_run("local:h", response_id="resp_same").ref == ref
    other = ledger.for_principal("globex").runs.open_run("local:h", response_id="resp_same")
    assert other.ref != ref and other.principal == "globex"
    assert tenant.runs.open_run("local:other", response_id="resp_same").ref != ref  # another server


@pytest.mark.postgres
def test_a_registration_that_loses_the_race_returns_the_winners_run(pg_ledger: Ledger) -> None:
    """PostgreSQL does not serialise registrations: one can miss another's uncommitted run in
    its lookup, then meet it at the unique constraint. It answers with the winner's run."""
    tenant = pg_ledger.for_principal("acme")
    winner_ref = "run_winner"
    # However the block ends, the winner's connection closes (its insert rolled back if not
    # committed) before the pool waits for the loser, which may be waiting on it.
    with ThreadPoolExecutor(max_workers=1) as pool, pg_ledger.engine.connect() as winner:
        winner.execute(
            insert(RUNS).values(
                ref=winner_ref, principal="acme", uhp_server="local:h", response_id="resp_race",
                event_seq=0, created_at_ms=1, updated_at_ms=1,
            )
        )  # fmt: skip
        loser = pool.submit(tenant.runs.open_run, "local:h", response_id="resp_race")
        # The loser's insert waits on the winner's uncommitted key: wait until it does.
        wait_for_lock_waiters(pg_ledger.engine, 1)
        winner.commit()
        assert loser.result(timeout=30).ref == winner_ref
    assert tenant.runs.open_run("local:h", response_id="resp_race").ref == winner_ref


def test_remote_run_registered_before_post_then_ids_recorded(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = tenant.runs.open_run("http://127.0.0.1:8800", idempotency_key="idem-1")
    assert run.status is None and run.response_id is None
    assert tenant.runs.open_run("http://127.0.0.1:8800", idempotency_key="idem-1").ref == run.ref
    tenant.runs.record_outer_ids(run.ref, response_id="resp_9", session_id="hsess9")
    tenant.runs.record_outer_ids(run.ref, response_id="resp_9")  # same ids again: no-op
    with pytest.raises(ConflictingIds):
        tenant.runs.record_outer_ids(run.ref, response_id="resp_other")
    found = tenant.reads.find_run("http://127.0.0.1:8800", "resp_9")
    assert found is not None and found.ref == run.ref
    assert tenant.runs.record_outer_sequence(run.ref, 3)
    assert not tenant.runs.record_outer_sequence(run.ref, 2)
    assert tenant.reads.get_run(run.ref).last_sequence == 3
    assert _types(ledger, run.ref) == ["run.registered", "outer.ids_recorded"]


def test_due_tasks_oldest_first_and_schedule_poll(ledger: Ledger, clock: FakeClock) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    a, b = new_task(tenant, run.ref), new_task(tenant, run.ref)
    tenant.tasks.schedule_poll(a.ref, clock() + 500)
    tenant.tasks.schedule_poll(b.ref, clock() + 100)
    assert tenant.reads.due_tasks(clock()) == []
    clock.advance(1_000)
    assert [t.ref for t in tenant.reads.due_tasks(clock())] == [b.ref, a.ref]


def test_events_never_carry_raw_task_ids(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    raw = "raw-secret-task-id-0123456789"
    task = new_task(tenant, run.ref, task_id=raw)
    tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests={"k": APPROVAL})
    )
    tenant.inputs.record_input_answer(task.ref, "k", {"action": "accept"})
    tenant.tasks.record_cancel_requested(task.ref, "host")
    tenant.tasks.mark_task_lost(task.ref, LostReason.TTL_EXPIRED)
    tenant.tasks.observe_task(task.ref, TaskObservation(TaskStatus.FAILED, error={"code": 1}))
    dumped = json.dumps([e.model_dump(mode="json") for e in tenant.reads.events(run.ref)])
    assert raw not in dumped and task.ref in dumped
    assert raw not in repr(tenant.reads.get_task(task.ref))


def test_unknown_refs_raise_not_found(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    with pytest.raises(NotFound):
        tenant.reads.get_run("run_missing")
    with pytest.raises(NotFound):
        tenant.tasks.observe_task("tk_missing", TaskObservation(TaskStatus.WORKING))
    with pytest.raises(NotFound):
        tenant.calls.begin_dispatch(
            "run_missing", server_endpoint=ENDPOINT, tool_name="t", arguments={}
        )


def test_listener_hears_each_commit_that_appended_events(ledger: Ledger) -> None:
    heard: list[tuple[str, str, int]] = []
    ledger.add_listener(lambda p, r, s: heard.append((p, r, s)))
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    new_task(tenant, run.ref)  # begin/sent append nothing; created appends one
    assert heard == [("acme", run.ref, 1), ("acme", run.ref, 2)]


def test_answers_are_kept_until_delivered(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests={"k": APPROVAL})
    )
    tenant.inputs.record_input_answer(task.ref, "k", {"action": "accept", "content": {"ok": True}})
    (pending,) = tenant.inputs.undelivered_answers()
    assert pending.key == "k" and pending.answer == {"action": "accept", "content": {"ok": True}}
    with pytest.raises(UnknownInputKey):
        tenant.inputs.mark_answer_delivered(task.ref, "k")  # by reference only, never by raw key
    tenant.inputs.mark_answer_delivered(task.ref, pending.ref)
    assert tenant.inputs.undelivered_answers() == []
    (request,) = tenant.reads.input_requests(task.ref)
    assert request.delivered_at_ms is not None and request.answer is None


def test_detached_task_is_no_longer_watched_but_still_recorded(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    assert tenant.tasks.detach_task(task.ref, "host")
    assert not tenant.tasks.detach_task(task.ref, "host")
    detached = tenant.reads.get_task(task.ref)
    assert not detached.is_open and detached.next_poll_due_ms is None
    assert detached.cancel_requested_at_ms is None  # detaching is not cancelling
    assert tenant.reads.list_tasks(open_only=True) == [] and tenant.reads.due_tasks(10**15) == []
    done = tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": False})
    )
    assert done.task.status is TaskStatus.COMPLETED and done.task.next_poll_due_ms is None
    assert "task.detached" in _types(ledger, run.ref)


def test_rpc_error_reply_settles_the_dispatch_as_a_failed_result(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    op = tenant.calls.begin_dispatch(run.ref, server_endpoint=ENDPOINT, tool_name="t", arguments={})
    tenant.calls.mark_dispatch_sent(op.ref)
    settled = tenant.calls.record_call_error(op.ref, {"code": -32021, "message": "needs tasks"})
    assert settled.state is CallState.RESULT
    assert settled.result == {"error": {"code": -32021, "message": "needs tasks"}}
    event = tenant.reads.events(run.ref)[-1]
    assert isinstance(event, ev.CallResult) and event.rpc_error and event.is_error


def test_server_unreachable_is_reported_on_the_tasks_run(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    tenant.tasks.record_server_unreachable(task.ref, 123, "connection refused")
    event = tenant.reads.events(run.ref)[-1]
    assert isinstance(event, ev.ServerUnreachable) and event.task_ref == task.ref
    assert tenant.reads.get_task(task.ref).is_open  # unreachable is not lost


def test_server_text_quoting_the_raw_task_id_is_scrubbed_from_events(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    raw = "RAW-0123456789abcdef"
    task = new_task(tenant, run.ref, task_id=raw)
    tenant.tasks.observe_task(
        task.ref,
        TaskObservation(
            TaskStatus.INPUT_REQUIRED,
            status_message=f"task {raw} needs approval",
            input_requests={f"{raw}:k1": {"method": "elicitation/create", "params": {"m": raw}}},
        ),
    )
    (request,) = tenant.reads.input_requests(task.ref)
    tenant.inputs.record_input_answer(task.ref, request.ref, {"action": "accept"})
    tenant.tasks.observe_task(
        task.ref,
        TaskObservation(
            TaskStatus.COMPLETED,
            result={"content": [{"type": "text", "text": f"{raw} done"}], "isError": False},
        ),
    )
    tenant.runs.record_anomaly(run.ref, "probe", "nothing raw here", task_ref=task.ref)
    events = tenant.reads.events(run.ref)
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert raw not in dumped
    assert f"[{task.ref}] done" in dumped  # replaced by the reference, still valid JSON
    assert request.key == f"{raw}:k1"  # the ledger keeps the raw key to answer the server
    assert raw not in repr(request)


def test_inline_settle_with_the_known_intent_on_both_backends(ledger: Ledger) -> None:
    """The requester's fast path (the intent view passed back, no read-back of the row)."""
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    intent = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, tool_name="echo", arguments={"t": "é"}, sent=True
    )
    result = {"content": [{"type": "text", "text": "ok \u2603"}], "isError": False}
    settled = tenant.calls.record_immediate_result(intent.ref, result, intent=intent)
    assert settled.state is CallState.RESULT and settled.result == result
    assert tenant.reads.get_dispatch(intent.ref).result == result
    with pytest.raises(InvalidTransition):
        tenant.calls.record_immediate_result(intent.ref, result, intent=intent)  # settled once
    with pytest.raises(NotFound):
        ledger.for_principal("mallory").calls.record_immediate_result(
            intent.ref, result, intent=intent
        )
    events = tenant.reads.events(run.ref)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[-1], ev.CallResult) and events[-1].op_ref == intent.ref
