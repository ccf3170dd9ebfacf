"""The trace of a run whose nested MCP tasks outlive a restart (docs/guides/trace-nested-tasks.md).

Spans go to an in-memory exporter. A first bridge serves a run and calls generate_report twice:
once waiting for the result, once detached; it then shuts down with the second task still
running. A second bridge on the same ledger (a restarted process) picks the task up, sees it
finish, and ends the run. The example checks the shape the guide draws: one trace; the
``tools/call`` spans and both ``mcp.task`` spans are children of the first ``uhp.response``
span; each task span is linked to the call that created it and ends with ``task.terminal``;
the resumed ``uhp.response`` is a child of the first; no raw task id or token in any span.

    python docs/examples/trace_nested_tasks.py

Environment: BRIDGE_EXAMPLE_REPORTS_URL, BRIDGE_EXAMPLE_TOKEN, BRIDGE_EXAMPLE_DB (the ledger
the guide's `bridge` CLI commands then read, principal "acme").
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import anyio

from bridge import (
    Bridge,
    BridgeSettings,
    Ledger,
    McpServerConfig,
    OuterStatus,
    TaskPending,
    TaskSettled,
    WaitMode,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

LEDGER = os.environ["BRIDGE_EXAMPLE_DB"]
TOKEN = os.environ["BRIDGE_EXAMPLE_TOKEN"]
SERVERS = [
    McpServerConfig(
        name="reports", url=os.environ["BRIDGE_EXAMPLE_REPORTS_URL"], credential_ref="reports"
    )
]
OPTIONS = {"principals": ["acme"], "mcp_servers": SERVERS, "credentials": {"reports": TOKEN}.get}


def install_tracing() -> InMemorySpanExporter:
    # --8<-- [start:provider]
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()  # in production: your collector's exporter
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the bridge only uses the OpenTelemetry API
    # --8<-- [end:provider]
    return exporter


async def run_across_a_restart() -> tuple[str, str]:
    quick = {"quarter": "Q1", "sections": 1, "seconds_per_section": 0.1}
    slow = {"quarter": "Q2", "sections": 2, "seconds_per_section": 0.5}
    async with Bridge.open(BridgeSettings(ledger_url=LEDGER, **OPTIONS)) as first:
        run = await first.register_served_run(
            "acme", response_id="resp_trace", session_id="hsess_trace", harness_id="chrn_trace"
        )
        done = await run.call_tool("reports", "generate_report", quick)
        pending = await run.call_tool("reports", "generate_report", slow, wait=WaitMode.DETACH)
        if not (isinstance(done, TaskSettled) and isinstance(pending, TaskPending)):
            sys.exit(f"expected a settled and a pending task, got {done!r} and {pending!r}")
    async with Bridge.open(
        BridgeSettings(ledger_url=LEDGER, **OPTIONS)
    ) as second:  # a restarted process
        with anyio.fail_after(30):
            async for event in second.run("acme", run.ref).subscribe():
                if event.type == "task.terminal" and event.task_ref == pending.task.ref:
                    break
        await second.run("acme", run.ref).record_status(OuterStatus.COMPLETED)
    return run.ref, pending.task.ref


def check_spans(exporter: InMemorySpanExporter, run_ref: str, outlived_ref: str) -> None:
    every_span = exporter.get_finished_spans()  # the SDK's own spans (tasks/get, …) included
    spans = [s for s in every_span if s.instrumentation_scope.name == "uhp-mcp-bridge"]
    outer = [s for s in spans if s.name == "uhp.response"]
    calls = [s for s in spans if s.name == "tools/call generate_report"]
    tasks = [s for s in spans if s.name == "mcp.task"]
    problems: list[str] = []
    if (len(outer), len(calls), len(tasks)) != (2, 2, 2):
        sys.exit(f"expected 2 uhp.response, 2 tools/call, 2 mcp.task: {[s.name for s in spans]}")
    first = next(s for s in outer if not (s.attributes or {}).get("bridge.resumed"))
    resumed = next(s for s in outer if (s.attributes or {}).get("bridge.resumed"))
    first_id = first.context.span_id
    if len({s.context.trace_id for s in spans}) != 1:
        problems.append("the run's bridge spans are not one trace")
    if resumed.parent is None or resumed.parent.span_id != first_id:
        problems.append("the resumed uhp.response is not a child of the first")
    if (first.attributes or {}).get("bridge.run.ref") != run_ref:
        problems.append("uhp.response does not carry bridge.run.ref")
    call_ids = {c.context.span_id for c in calls}
    for span in [*calls, *tasks]:
        if span.parent is None or span.parent.span_id != first_id:
            problems.append(f"{span.name} is not a child of the first uhp.response")
    for task in tasks:
        attributes = task.attributes or {}
        if not task.links or any(link.context.span_id not in call_ids for link in task.links):
            problems.append("an mcp.task span is not linked to the tools/call that created it")
        if [e.name for e in task.events][-1:] != ["task.terminal"]:
            problems.append("an mcp.task span does not end with task.terminal")
        if attributes.get("bridge.mcp_task.status") != "completed":
            problems.append(f"task status attribute {attributes.get('bridge.mcp_task.status')}")
    outlived = next(
        t for t in tasks if (t.attributes or {}).get("bridge.mcp_task.ref") == outlived_ref
    )
    if outlived.start_time >= resumed.start_time:
        problems.append("the task that outlived the restart does not span both processes")
    ledger = Ledger.open(LEDGER)
    raw_ids = [t.task_id for t in ledger.for_principal("acme").reads.list_tasks(run_ref=run_ref)]
    ledger.close()
    text = json.dumps(
        [
            [s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]]
            for s in every_span
        ],
        default=str,
    )
    problems += [f"a secret appears in the spans: {s[:4]}…" for s in [TOKEN, *raw_ids] if s in text]
    if problems:
        sys.exit("; ".join(problems))
    print(f"uhp.response {first.attributes.get('uhp.response.id')}  {run_ref}")
    for call in calls:
        where = f"{call.attributes.get('server.address')}:{call.attributes.get('server.port')}"
        print(f"├─ {call.name}  {where}")
    for task in tasks:
        names = ", ".join(e.name for e in task.events)
        print(f"├─ mcp.task {task.attributes.get('bridge.mcp_task.ref')}  events: {names}")
    print("└─ uhp.response (bridge.resumed=true)")


if __name__ == "__main__":
    span_exporter = install_tracing()
    run_ref, outlived_ref = anyio.run(run_across_a_restart)
    check_spans(span_exporter, run_ref, outlived_ref)
