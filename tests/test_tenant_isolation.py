"""Every read and write path, called by a foreign principal, finds nothing and changes nothing."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import astuple, replace
from typing import Any

import anyio
import pytest

from bridge._errors import NotFound
from bridge._ledger._base import TenantScope
from bridge._ledger.commit.group_commit import StagedCommit
from bridge._ledger.reads.attention import AttentionWindow
from bridge._ledger.reads.queries import TenantQueries
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import Admission, LostReason, OuterStatus, TaskStatus
from tests.support.builders import ENDPOINT, new_run, new_task

SERVER = "local:test-harness"


@pytest.fixture
def acme(ledger: Ledger) -> dict[str, Any]:
    """A fully populated tenant: a run with a dispatch, a task and a pending input request."""
    tenant = ledger.for_principal("acme")
    run = new_run(tenant, response_id="resp_acme")
    remote = tenant.runs.open_run(
        "http://127.0.0.1:8800", idempotency_key="idem-acme", request_json='{"body": {}}'
    )
    task = new_task(tenant, run.ref, task_id="acme-task-handle")
    tenant.tasks.observe_task(
        task.ref,
        TaskObservation(
            TaskStatus.INPUT_REQUIRED,
            input_requests={
                "k": {"method": "elicitation/create", "params": {}},
                "k2": {"method": "elicitation/create", "params": {"n": 2}},
            },
        ),
    )
    tenant.inputs.record_input_answer(task.ref, "k2", {"action": "accept"})  # recorded, undelivered
    op_id = tenant.reads.get_dispatch(task.op_ref).operation_id
    # MRTR: one call waiting for an answer, one answered whose next leg is due.
    asking, answered = (_call_asking(tenant, run.ref, key) for key in ("q", "r"))
    tenant.rounds.record_call_input_answer(answered, "r", {"action": "decline"})
    tenant.agent_states.save_agent_state(run.ref, "agent", {"history": ["hello"]})
    tenant.gateway_handles.record_gateway_handle("acme-gateway-handle", task.ref, task.op_ref)
    return {
        "tenant": tenant,
        "run": run,
        "remote": remote,
        "task": task,
        "op_id": op_id,
        "asking": asking,
        "answered": answered,
    }


def _call_asking(tenant: TenantLedger, run_ref: str, key: str) -> str:
    """A call the server answered with an InputRequiredResult asking ``key``: its op_ref."""
    call = tenant.calls.begin_dispatch(
        run_ref, server_endpoint=ENDPOINT, tool_name="pay", arguments={}, sent=True
    )
    request = {"method": "elicitation/create", "params": {"message": "?"}}
    tenant.rounds.record_input_round(call.ref, {key: request}, request_state="s", arguments={})
    return call.ref


def _flat_work(work: tuple[list[Any], list[Any], int]) -> list[Any]:
    """``run_work``'s tasks, dispatches and (when any) unanswered input count, in one list."""
    tasks, dispatches, pending = work
    return [*tasks, *dispatches, *([pending] if pending else [])]


def _reads(foreign: TenantLedger, acme: dict[str, Any], now: int) -> dict[str, Callable[[], Any]]:
    run, task = acme["run"], acme["task"]
    return {
        "get_run": lambda: foreign.reads.get_run(run.ref),
        "attention": lambda: foreign.attention.attention(AttentionWindow(now, 0, 0)),
        "find_run": lambda: foreign.reads.find_run(SERVER, "resp_acme"),
        "find_run_by_idempotency_key": lambda: foreign.reads.find_run_by_idempotency_key(
            "idem-acme"
        ),
        "list_runs": lambda: (
            foreign.reads.list_runs() + foreign.reads.list_runs(response_id="resp_acme")
        ),
        "get_dispatch": lambda: foreign.reads.get_dispatch(task.op_ref),
        "find_dispatch": lambda: foreign.reads.find_dispatch(acme["op_id"]),
        "list_dispatches": lambda: (
            foreign.reads.list_dispatches(run_ref=run.ref) + foreign.reads.list_dispatches()
        ),
        "get_task": lambda: foreign.reads.get_task(task.ref),
        "list_tasks": lambda: (
            foreign.reads.list_tasks(run_ref=run.ref) + foreign.reads.list_tasks()
        ),
        "due_tasks": lambda: foreign.reads.due_tasks(now + 10**9),
        "input_requests": lambda: foreign.reads.input_requests(task.ref),
        "run_work": lambda: _flat_work(foreign.reads.run_work(run.ref)),
        "events": lambda: foreign.reads.events(run.ref),
        "run_event_seqs": lambda: foreign.reads.run_event_seqs([run.ref]),
        "undelivered_answers": lambda: foreign.inputs.undelivered_answers(),
        "pending_input_requests": lambda: foreign.reads.pending_input_requests(),
        "input_digests": lambda: foreign.reads.input_digests([task.ref]),
        "admission_of": lambda: foreign.calls.admission_of(task.op_ref),
        "unacknowledged_runs": lambda: (
            foreign.reads.unacknowledged_runs()
            + foreign.reads.unacknowledged_runs("http://127.0.0.1:8800")
        ),
        "run_request": lambda: foreign.reads.run_request(acme["remote"].ref),
        "call_inputs": lambda: foreign.rounds.call_inputs(acme["asking"]),
        "pending_call_inputs": lambda: foreign.rounds.pending_call_inputs(),
        "calls_ready_to_retry": lambda: foreign.rounds.calls_ready_to_retry(),
        "current_leg": lambda: foreign.rounds.current_leg(acme["asking"]),
        "agent_state": lambda: foreign.agent_states.agent_state(acme["run"].ref, "agent"),
        "gateway_handle_task": lambda: foreign.gateway_handles.gateway_handle_task(
            "acme-gateway-handle"
        ),
        "latest_run_of": lambda: foreign.reads.latest_run_of(SERVER, "resp_acme", "#"),
        "due_webhooks": lambda: foreign.outbox.due_webhooks(),
        "next_webhook_due_ms": lambda: foreign.outbox.next_webhook_due_ms(),
        "webhook_outbox_figures": lambda: [
            n for n in astuple(foreign.outbox.webhook_outbox_figures()) if n
        ],
    }


def _grouped(foreign: TenantLedger, stage: Callable[[], StagedCommit[Any, Any, Any]]) -> Any:
    """A staged call-path write, staged and committed through the ledger's group commit."""

    async def commit() -> Any:
        return await LedgerRunner(inline=False).commit(foreign.group_commit, stage())

    return anyio.run(commit)


def _writes(foreign: TenantLedger, acme: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    run, task, remote = acme["run"], acme["task"], acme["remote"]
    own_call = acme["tenant"].reads.get_dispatch(acme["asking"])
    return {
        "record_outer_ids": lambda: foreign.runs.record_outer_ids(remote.ref, response_id="resp_x"),
        "observe_outer": lambda: foreign.runs.observe_outer(run.ref, OuterStatus.FAILED),
        "record_outer_sequence": lambda: foreign.runs.record_outer_sequence(run.ref, 99),
        "record_trace_context": lambda: foreign.runs.record_trace_context(
            run.ref, "0" * 32, "0" * 16
        ),
        "record_anomaly": lambda: foreign.runs.record_anomaly(run.ref, "x", "y"),
        "acknowledge": lambda: foreign.operator.acknowledge(f"{run.ref}:1", "mallory"),
        "close_run": lambda: foreign.operator.close_run(
            run.ref, OuterStatus.FAILED, "x", "mallory"
        ),
        "record_fields_ignored": lambda: foreign.runs.record_fields_ignored(run.ref, ["tools"]),
        "save_agent_state": lambda: foreign.agent_states.save_agent_state(
            run.ref, "agent", {"history": []}
        ),
        "record_gateway_handle": lambda: foreign.gateway_handles.record_gateway_handle(
            "mallory-handle", task.ref, task.op_ref
        ),
        "record_stream_lost": lambda: foreign.runs.record_stream_lost(run.ref, "x", 3),
        "record_stream_resumed": lambda: foreign.runs.record_stream_resumed(run.ref, "reread", 3),
        "begin_dispatch": lambda: foreign.calls.begin_dispatch(
            run.ref, server_endpoint=ENDPOINT, tool_name="t", arguments={}
        ),
        "stage_dispatch": lambda: _grouped(
            foreign,
            lambda: foreign.calls.stage_dispatch(
                run.ref, server_endpoint=ENDPOINT, tool_name="t", arguments={}, sent=True
            ),
        ),
        "stage_immediate_result": lambda: _grouped(  # an intent view claiming to be theirs
            foreign,
            lambda: foreign.calls.stage_immediate_result(
                {}, intent=replace(own_call, principal=foreign.principal)
            ),
        ),
        "stage_task_created": lambda: _grouped(
            foreign,
            lambda: foreign.calls.stage_task_created(
                task.op_ref, task_id="x", status=TaskStatus.WORKING
            ),
        ),
        "mark_dispatch_sent": lambda: foreign.calls.mark_dispatch_sent(task.op_ref),
        "mark_dispatch_unknown": lambda: foreign.calls.mark_dispatch_unknown(task.op_ref, "x"),
        "record_immediate_result": lambda: foreign.calls.record_immediate_result(task.op_ref, {}),
        "record_task_created": lambda: foreign.calls.record_task_created(
            task.op_ref, task_id="x", status=TaskStatus.WORKING
        ),
        "observe_task": lambda: foreign.tasks.observe_task(
            task.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": []})
        ),
        "mark_task_lost": lambda: foreign.tasks.mark_task_lost(task.ref, LostReason.NOT_FOUND),
        "record_input_answer": lambda: foreign.inputs.record_input_answer(task.ref, "k", {}),
        "record_input_declined": lambda: foreign.inputs.record_input_declined(
            task.ref, "k", "undeclared", {"action": "decline"}
        ),
        "record_input_handler_failed": lambda: foreign.inputs.record_input_handler_failed(
            task.ref, "k", "raised", "x", "declined"
        ),
        "record_input_stuck": lambda: foreign.inputs.record_input_stuck(
            task.ref, ["k"], polls=1, waited_ms=0, cancel=False
        ),
        "record_cancel_requested": lambda: foreign.tasks.record_cancel_requested(task.ref, "x"),
        "record_cancel_acknowledged": lambda: foreign.tasks.record_cancel_acknowledged(task.ref),
        "mark_answer_delivered": lambda: foreign.inputs.mark_answer_delivered(task.ref, "k"),
        "record_answer_refused": lambda: foreign.inputs.record_answer_refused(
            task.ref, "in_x", "x"
        ),
        "detach_task": lambda: foreign.tasks.detach_task(task.ref, "x"),
        "record_server_unreachable": lambda: foreign.tasks.record_server_unreachable(
            task.ref, 0, "x"
        ),
        "record_step_failure": lambda: foreign.tasks.record_step_failure(task.ref, "x"),
        "record_open_tasks_at_end": lambda: foreign.runs.record_open_tasks_at_end(
            run.ref, OuterStatus.COMPLETED, [task.ref], "reported"
        ),
        "record_call_error": lambda: foreign.calls.record_call_error(task.op_ref, {"code": 1}),
        "record_admission": lambda: foreign.calls.record_admission(
            task.op_ref, Admission.ADMITTED, "host"
        ),
        "record_input_round": lambda: foreign.rounds.record_input_round(
            acme["asking"], {}, request_state=None, arguments={}
        ),
        "record_call_input_answer": lambda: foreign.rounds.record_call_input_answer(
            acme["asking"], "q", {}
        ),
        "begin_retry_leg": lambda: foreign.rounds.begin_retry_leg(acme["answered"]),
        "record_call_input_declined": lambda: foreign.rounds.record_call_input_declined(
            acme["asking"], "q", "undeclared", {"action": "decline"}
        ),
        "record_call_input_handler_failed": lambda: foreign.rounds.record_call_input_handler_failed(
            acme["asking"], "q", "raised", "x", "declined"
        ),
    }


# Writes that cannot address a foreign record by construction (they create new ones, or are
# filtered updates that silently match nothing), checked separately below.
CREATES_OR_FILTERS = {
    "open_run",
    "schedule_poll",
    "webhook_delivered",
    "webhook_attempt_failed",
    "webhook_undeliverable",
}


def test_every_public_method_is_covered(ledger: Ledger, acme: dict[str, Any]) -> None:
    foreign = ledger.for_principal("mallory")
    # The tenant ledger and every aggregate it is composed of (runs, calls, tasks, ...).
    parts = [foreign, *(part for part in vars(foreign).values() if isinstance(part, TenantScope))]
    public = {
        name
        for part in parts
        for name, member in inspect.getmembers(type(part))
        if not name.startswith("_") and callable(member)
    }
    covered = set(_reads(foreign, acme, 0)) | set(_writes(foreign, acme)) | CREATES_OR_FILTERS
    assert public == covered, f"add isolation checks for: {sorted(public - covered)}"


def test_the_tenant_ledger_is_composed_with_reads_beside_writes(ledger: Ledger) -> None:
    """One object per aggregate over the same principal; none inherits another (the writes get
    the reads passed in), so only ``reads`` is a read object."""
    tenant = ledger.for_principal("acme")
    parts = {name: part for name, part in vars(tenant).items() if isinstance(part, TenantScope)}
    assert set(parts) == {
        *("reads", "runs", "calls", "tasks", "inputs", "rounds", "agent_states"),
        *("gateway_handles", "operator", "attention", "outbox"),
    }
    assert {part.principal for part in parts.values()} == {"acme"}
    assert [name for name, part in parts.items() if isinstance(part, TenantQueries)] == ["reads"]
    classes = [type(part) for part in parts.values()]
    assert [(a, b) for a in classes for b in classes if a is not b and issubclass(a, b)] == []


def test_foreign_reads_find_nothing(ledger: Ledger, acme: dict[str, Any]) -> None:
    foreign = ledger.for_principal("mallory")
    for name, read in _reads(foreign, acme, ledger.clock()).items():
        try:
            found = read()
        except NotFound:
            continue
        assert found in (None, [], {}), f"{name} leaked another tenant's rows"
    own = ledger.for_principal("acme")
    assert own.reads.get_task(acme["task"].ref).ref == acme["task"].ref  # the data is really there
    assert own.reads.input_digests([acme["task"].ref]), "the owner sees its input keys"
    assert own.reads.run_event_seqs([acme["run"].ref]), "the owner sees its runs' sequence numbers"
    assert len(own.reads.list_runs()) == 2
    assert [r.ref for r in own.reads.unacknowledged_runs()] == [acme["remote"].ref]
    assert own.reads.run_request(acme["remote"].ref) == '{"body": {}}'
    assert [i.key for i in own.rounds.pending_call_inputs()] == ["q"]
    assert own.rounds.calls_ready_to_retry() == [acme["answered"]]
    saved = own.agent_states.agent_state(acme["run"].ref, "agent")
    assert saved is not None and saved.state == {"history": ["hello"]}
    assert own.gateway_handles.gateway_handle_task("acme-gateway-handle") == acme["task"].ref
    assert [r.ref for r in own.reads.list_runs(response_id="resp_acme")] == [acme["run"].ref]
    latest = own.reads.latest_run_of(SERVER, "resp_acme", "#")
    assert latest is not None and latest.ref == acme["run"].ref


def test_foreign_writes_are_refused_and_change_nothing(
    ledger: Ledger, acme: dict[str, Any]
) -> None:
    own = ledger.for_principal("acme")
    before_events = own.reads.events(acme["run"].ref)
    before_task = own.reads.get_task(acme["task"].ref)
    foreign = ledger.for_principal("mallory")
    for name, write in _writes(foreign, acme).items():
        with pytest.raises(NotFound):
            write()
            pytest.fail(f"{name} accepted a foreign record")
    foreign.tasks.schedule_poll(acme["task"].ref, 0)
    assert own.reads.events(acme["run"].ref) == before_events
    assert own.reads.get_task(acme["task"].ref) == before_task
    assert own.reads.get_run(acme["remote"].ref).response_id is None


def test_foreign_webhook_settles_match_nothing(ledger: Ledger, acme: dict[str, Any]) -> None:
    own = ledger.for_principal("acme")
    due = own.outbox.due_webhooks()
    assert due, "the owner's attention items wait in its outbox"
    foreign = ledger.for_principal("mallory")
    for item in due:
        assert foreign.outbox.webhook_delivered(item.id) is False
        assert foreign.outbox.webhook_attempt_failed(item.id, "x", 0) is False
        assert foreign.outbox.webhook_undeliverable(item.id, "x") is None
    assert own.outbox.due_webhooks() == due


def test_same_ids_in_two_tenants_are_two_records(ledger: Ledger, acme: dict[str, Any]) -> None:
    foreign = ledger.for_principal("mallory")
    theirs = foreign.runs.open_run(SERVER, response_id="resp_acme")
    assert theirs.ref != acme["run"].ref and theirs.principal == "mallory"
    mine = foreign.runs.open_run("http://127.0.0.1:8800", idempotency_key="idem-acme")
    assert mine.ref != acme["remote"].ref
    task = new_task(foreign, theirs.ref, task_id="acme-task-handle")  # same raw id, other tenant
    assert task.ref != acme["task"].ref
    assert [r.ref for r in foreign.reads.list_runs()] != []
    assert acme["run"].ref not in {r.ref for r in foreign.reads.list_runs()}


def test_a_principal_is_required(ledger: Ledger) -> None:
    with pytest.raises(ValueError):
        ledger.for_principal("")
