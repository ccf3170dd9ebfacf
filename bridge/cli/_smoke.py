"""Smoke run of the ledger: register a run, nest task handles in it, print the tree and events.

    python -m bridge.cli._smoke [--db URL]

With no ``--db`` it uses a fresh SQLite file in a temporary folder. This exercises the
write-ahead path the MCP side will drive (intent -> sent -> handle -> observations -> terminal)
without any network, so a newcomer can see what the ledger records.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import LostReason, OuterStatus, TaskStatus

REPORTS = "http://127.0.0.1:8701/mcp"
PAYMENTS = "http://127.0.0.1:8702/mcp"


def _sent(tenant: TenantLedger, run_ref: str, endpoint: str, tool: str, **call: Any) -> str:
    """A ``tools/call`` recorded as an intent, then as sent: its operation reference."""
    server = "reports" if endpoint == REPORTS else "payments"
    dispatch = tenant.calls.begin_dispatch(
        run_ref, server_endpoint=endpoint, server_name=server, tool_name=tool, **call
    )
    tenant.calls.mark_dispatch_sent(dispatch.ref)
    return dispatch.ref


def _nest_tasks(tenant: TenantLedger, run_ref: str) -> None:
    report = _sent(
        tenant,
        run_ref,
        REPORTS,
        "generate_report",
        arguments={"quarter": "Q3"},
        operation_id="smoke-report-q3",
    )
    report_task = tenant.calls.record_task_created(
        report,
        task_id="smoke-task-report-0001",
        status=TaskStatus.WORKING,
        ttl_ms=3_600_000,
        poll_interval_ms=1_000,
    )
    tenant.tasks.observe_task(
        report_task.ref,
        TaskObservation(status=TaskStatus.WORKING, status_message="rendering charts"),
    )
    tenant.tasks.observe_task(
        report_task.ref,
        TaskObservation(
            status=TaskStatus.COMPLETED,
            result={"content": [{"type": "text", "text": "Q3 report ready"}], "isError": False},
        ),
    )

    payment = _sent(
        tenant, run_ref, PAYMENTS, "approve_payment", arguments={"amount": 120, "currency": "EUR"}
    )
    payment_task = tenant.calls.record_task_created(
        payment, task_id="smoke-task-payment-0002", status=TaskStatus.WORKING, ttl_ms=600_000
    )
    approval = {"method": "elicitation/create", "params": {"message": "Approve 120 EUR?"}}
    tenant.tasks.observe_task(
        payment_task.ref,
        TaskObservation(status=TaskStatus.INPUT_REQUIRED, input_requests={"approve-1": approval}),
    )
    tenant.inputs.record_input_answer(payment_task.ref, "approve-1", {"action": "accept"})

    lost = _sent(tenant, run_ref, REPORTS, "generate_report", arguments={"quarter": "Q4"})
    lost_task = tenant.calls.record_task_created(
        lost, task_id="smoke-task-report-0003", status=TaskStatus.WORKING, ttl_ms=1_000
    )
    tenant.tasks.mark_task_lost(lost_task.ref, LostReason.NOT_FOUND, "tasks/get answered -32602")

    unknown = _sent(
        tenant, run_ref, PAYMENTS, "approve_payment", arguments={"amount": 99, "currency": "EUR"}
    )
    tenant.calls.mark_dispatch_unknown(unknown, "connection reset before any reply")


def _print_tree(tenant: TenantLedger, run_ref: str) -> None:
    run = tenant.reads.get_run(run_ref)
    status = run.status.value if run.status else "unacknowledged"
    print(f"run {run.ref}  response={run.response_id} session={run.session_id} status={status}")
    tasks = {t.op_ref: t for t in tenant.reads.list_tasks(run_ref=run_ref)}
    for op in tenant.reads.list_dispatches(run_ref=run_ref):
        print(f"  call {op.ref}  {op.server_name}.{op.tool_name}  state={op.state.value}")
        task = tasks.get(op.ref)
        if task is None:
            if op.unknown_reason:
                print(f"    verdict: unknown outcome ({op.unknown_reason})")
            continue
        verdict = f"  verdict=lost({task.lost_reason.value})" if task.lost_reason else ""
        print(f"    task {task.ref}  status={task.status.value}{verdict}")
        for request in tenant.reads.input_requests(task.ref):
            answered = "answered" if request.answered_at_ms else "pending"
            print(f"      input {request.key!r} {request.method} {answered}")
        if task.result is not None:
            print(f"      result: {task.result}")
    print("events:")
    for event in tenant.reads.events(run_ref):
        extra = getattr(event, "task_ref", None) or getattr(event, "op_ref", None) or ""
        print(f"  {event.seq:>3} {event.type:<22} {extra}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--db", help="ledger URL or SQLite path (default: a temporary file)")
    parser.add_argument("--principal", default="smoke-tenant")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        url = args.db or str(Path(scratch) / "ledger.db")
        ledger = Ledger.open(url)
        try:
            tenant = ledger.for_principal(args.principal)
            run = tenant.runs.open_run(
                "local:smoke-harness",
                response_id="resp_smoke0001",
                session_id="hsess_smoke0001",
                harness_id="chrn_smoke",
                status=OuterStatus.IN_PROGRESS,
            )
            _nest_tasks(tenant, run.ref)
            tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)
            _print_tree(tenant, run.ref)
            others = ledger.for_principal("another-tenant").reads.list_runs()
            print(f"runs visible to another tenant: {len(others)}")
        finally:
            ledger.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
