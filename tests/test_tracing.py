"""Traces of a run with two nested tasks, one of which outlives a process restart; and no raw
task id or bearer token in the spans, events, logs or CLI output of a full run."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import SpanKind
from typer.testing import CliRunner

from bridge import (
    Bridge,
    BridgeSettings,
    McpServerConfig,
    OuterStatus,
    TaskPending,
    TaskSettled,
    WaitMode,
)
from bridge._ledger.store import Ledger
from bridge.cli._app import app
from tests.support.bridging import FAST, finished_spans_text, wait_closed
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
TOKEN = "secret-report-token-7c1f"


@pytest.fixture(scope="module")
def protected_server() -> Iterator[ServerProcess]:
    with ServerProcess(
        "harness_examples.mcp_servers.report_server", args=["--token", TOKEN]
    ) as server:
        yield server


def _options(server: ServerProcess) -> dict[str, Any]:
    servers = [McpServerConfig(name="reports", url=server.url, credential_ref="reports-token")]
    return {
        "principals": [P],
        "mcp_servers": servers,
        "credentials": {"reports-token": TOKEN}.get,
        "scheduler": FAST,
    }


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


async def test_trace_of_a_run_spanning_a_restart(
    tmp_path: Path,
    protected_server: ServerProcess,
    span_exporter: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    span_exporter.clear()
    db = tmp_path / "ledger.db"
    quick = {"quarter": "Q1", "sections": 1, "seconds_per_section": 0.1}
    slow = {"quarter": "Q2", "sections": 2, "seconds_per_section": 0.5}
    async with Bridge.open(BridgeSettings(ledger_url=db, **_options(protected_server))) as first:
        run = await first.register_served_run(
            P, response_id="resp_trace", session_id="hsess_trace", harness_id="chrn_trace"
        )
        done = await run.call_tool("reports", "generate_report", quick)
        pending = await run.call_tool("reports", "generate_report", slow, wait=WaitMode.DETACH)
        assert isinstance(done, TaskSettled) and isinstance(pending, TaskPending)
    # The process is gone; a new one resumes the run and its trace.
    async with Bridge.open(BridgeSettings(ledger_url=db, **_options(protected_server))) as second:
        await wait_closed(second._ledger.for_principal(P), pending.task.ref)
        await second.run(P, run.ref).record_status(OuterStatus.COMPLETED)

    spans = [
        s
        for s in span_exporter.get_finished_spans()
        if s.instrumentation_scope.name == "uhp-mcp-bridge"
    ]
    outer = [s for s in spans if s.name == "uhp.response"]
    calls = [s for s in spans if s.name == "tools/call generate_report"]
    tasks = [s for s in spans if s.name == "mcp.task"]
    assert len(outer) == 2 and len(calls) == 2 and len(tasks) == 2
    first_outer = next(s for s in outer if not s.attributes.get("bridge.resumed"))
    resumed = next(s for s in outer if s.attributes.get("bridge.resumed"))
    trace_id = first_outer.context.trace_id
    assert {s.context.trace_id for s in spans} == {trace_id}  # one connected trace
    assert first_outer.kind is SpanKind.SERVER
    assert first_outer.attributes["uhp.response.id"] == "resp_trace"
    assert first_outer.attributes["uhp.session.id"] == "hsess_trace"
    assert resumed.parent is not None and resumed.parent.span_id == first_outer.context.span_id
    assert resumed.attributes["uhp.response.status"] == "completed"
    for call in calls:
        assert call.kind is SpanKind.CLIENT
        assert call.parent is not None and call.parent.span_id == first_outer.context.span_id
        assert call.attributes["mcp.method.name"] == "tools/call"
        assert call.attributes["gen_ai.operation.name"] == "execute_tool"
        assert call.attributes["gen_ai.tool.name"] == "generate_report"
        assert "mcp.session.id" not in call.attributes
    call_ids = {c.context.span_id for c in calls}
    for task in tasks:
        assert task.parent is not None and task.parent.span_id == first_outer.context.span_id
        assert [link.context.span_id for link in task.links] and all(
            link.context.span_id in call_ids for link in task.links
        )  # linked to the tools/call that created it, not a synchronous child
        assert task.attributes["bridge.mcp_task.status"] == "completed"
        names = [event.name for event in task.events]
        assert "task.status_changed" in names and names[-1] == "task.terminal"
        assert task.end_time > task.start_time
    outlived = next(t for t in tasks if t.attributes["bridge.mcp_task.ref"] == pending.task.ref)
    assert outlived.start_time < resumed.start_time  # its lifetime spans both processes

    ledger = Ledger.open(db)
    tenant = ledger.for_principal(P)
    raw_ids = [t.task_id for t in tenant.reads.list_tasks(run_ref=run.ref)]
    events = json.dumps([e.model_dump(mode="json") for e in tenant.reads.events(run.ref)])
    ledger.close()
    spans_text = finished_spans_text(span_exporter)
    logs = caplog.text
    runner = CliRunner()
    cli_output = ""
    for command in (["show", run.ref], ["timeline", run.ref], ["events", run.ref, "--json"]):
        result = runner.invoke(app, ["--db", str(db), "--principal", P, *command])
        assert result.exit_code == 0, result.output
        cli_output += result.output
    assert pending.task.ref in cli_output
    for secret in [*raw_ids, TOKEN]:
        assert secret not in spans_text
        assert secret not in events
        assert secret not in logs
        assert secret not in cli_output
    assert db.read_bytes().find(TOKEN.encode()) == -1  # never stored in the ledger
