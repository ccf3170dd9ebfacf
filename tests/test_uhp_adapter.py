"""Bridge events as vendor-prefixed UHP stream events, and the metadata summary."""

from __future__ import annotations

import json

from bridge._ledger.reader import LedgerReader
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import LostReason, TaskStatus
from bridge.uhp._adapter import SUMMARY_KEY, nested_tasks_summary, to_uhp_event
from bridge.uhp._models import StreamEvent
from tests.support.builders import ENDPOINT, new_run, new_task

RAW = "raw-task-id-do-not-leak-0001"


def test_every_task_event_maps_to_a_vendor_event_without_raw_ids(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task = new_task(tenant, run.ref, task_id=RAW)
    approval = {"method": "elicitation/create", "params": {"message": "ok?"}}
    tenant.tasks.observe_task(
        task.ref,
        TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests={f"{RAW}:k": approval}),
    )
    (request,) = tenant.reads.input_requests(task.ref)
    tenant.inputs.record_input_answer(task.ref, request.ref, {"action": "accept"})
    tenant.tasks.record_cancel_requested(task.ref, "host")
    tenant.tasks.mark_task_lost(task.ref, LostReason.SERVER_GONE, "gone")
    tenant.tasks.observe_task(
        task.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": False})
    )
    op = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, tool_name="pay", arguments={}
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.mark_dispatch_unknown(op.ref, "reset")

    mapped = [to_uhp_event(e) for e in tenant.reads.events(run.ref)]
    uhp = [m for m in mapped if m is not None]
    types = [m["type"] for m in uhp]
    assert types == [
        "bridge.mcp_task.created",
        "bridge.mcp_task.status_changed",
        "bridge.mcp_task.input_required",
        "bridge.mcp_task.input_answered",
        "bridge.mcp_task.cancel_requested",
        "bridge.mcp_task.lost",
        "bridge.mcp_task.status_changed",
        "bridge.mcp_task.completed",
        "bridge.mcp_task.unknown_outcome",
    ]
    assert mapped[0] is None  # run.registered: the harness reports its own lifecycle
    for body in uhp:
        assert body["type"].startswith("bridge.") and isinstance(body["bridge_seq"], int)
        if "task_ref" in body:
            assert body["task_ref"] == task.ref
            assert body["tool"] == "generate_report" and body["server"] == "reports"
    assert RAW not in json.dumps(uhp)
    lost = uhp[5]
    assert lost["status"] == "lost" and lost["reason"] == "server_gone"
    assert uhp[7]["superseded_lost"] is True
    # A standard client reads them as ordinary (unknown-type) stream events.
    parsed = StreamEvent.model_validate({**uhp[2], "sequence_number": 9})
    assert parsed.type == "bridge.mcp_task.input_required" and not parsed.is_terminal


def test_summary_counts_statuses_and_verdicts(ledger: Ledger) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    done = new_task(tenant, run.ref)
    tenant.tasks.observe_task(
        done.ref, TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": False})
    )
    waiting = new_task(tenant, run.ref)
    tenant.tasks.observe_task(
        waiting.ref,
        TaskObservation(
            TaskStatus.INPUT_REQUIRED,
            input_requests={"k": {"method": "elicitation/create", "params": {}}},
        ),
    )
    gone = new_task(tenant, run.ref)
    tenant.tasks.mark_task_lost(gone.ref, LostReason.TTL_EXPIRED)
    summary = nested_tasks_summary(LedgerReader(ledger, "acme"), run.ref)[SUMMARY_KEY]
    assert summary["count"] == 3 and summary["lost"] == 1 and summary["pending_input"] == 1
    assert summary["by_status"] == {"completed": 1, "input_required": 1, "working": 1}
    verdicts = {t["task_ref"]: t["verdict"] for t in summary["tasks"]}
    assert verdicts[gone.ref] == "lost:ttl_expired" and verdicts[done.ref] is None
    json.dumps(summary)  # fits in a response's metadata as plain JSON
