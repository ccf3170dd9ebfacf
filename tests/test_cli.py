"""The ``bridge`` operator CLI over a ledger built through the public write path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import LostReason, TaskStatus
from bridge.cli._app import app, credential_env_name, load_mcp_config
from tests.conftest import FakeClock
from tests.support.builders import ENDPOINT, new_run, new_task

PRINCIPAL = "acme"
CHROMIUM = Path("/usr/bin/chromium")


@dataclass
class Scenario:
    db: Path
    run_ref: str
    done_ref: str
    waiting_ref: str
    lost_ref: str
    unknown_op: str
    input_ref: str
    raw_ids: list[str]  # raw MCP task ids and server input keys: must never be printed
    last_seq: int


def populate(ledger: Ledger, clock: FakeClock, db: Path) -> Scenario:
    """A run with three tasks (completed, input_required, lost), an unknown-outcome dispatch
    and an anomaly (a status regression observed after the terminal status)."""
    tenant = ledger.for_principal(PRINCIPAL)
    raw_done = "task-done-" + "a1" * 12
    raw_waiting = "task-wait-" + "b2" * 12
    raw_lost = "task-lost-" + "c3" * 12
    run = new_run(tenant, response_id="resp_cli0001", session_id="hsesscli0001")
    clock.advance(400)
    done = new_task(tenant, run.ref, task_id=raw_done, tool="generate_report")
    clock.advance(300)
    waiting = new_task(tenant, run.ref, task_id=raw_waiting, tool="approve_payment")
    clock.advance(500)
    # The server's key embeds the raw task id: it must stay in the ledger.
    key = f"{raw_waiting}/confirm"
    tenant.tasks.observe_task(
        waiting.ref,
        TaskObservation(
            TaskStatus.INPUT_REQUIRED,
            input_requests={
                key: {"method": "elicitation/create", "params": {"message": "Approve 120 EUR?"}}
            },
        ),
    )
    clock.advance(300)
    lost = new_task(tenant, run.ref, task_id=raw_lost, tool="render_chart")
    clock.advance(900)
    tenant.tasks.observe_task(
        done.ref,
        TaskObservation(
            TaskStatus.COMPLETED,
            result={"content": [{"type": "text", "text": "report ready"}], "isError": False},
        ),
    )
    clock.advance(200)
    op = tenant.calls.begin_dispatch(
        run.ref,
        server_endpoint=ENDPOINT,
        server_name="payments",
        tool_name="charge_card",
        arguments={"amount": 120},
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    clock.advance(700)
    tenant.calls.mark_dispatch_unknown(op.ref, "connection reset before a reply")
    clock.advance(600)
    tenant.tasks.mark_task_lost(lost.ref, LostReason.NOT_FOUND, "tasks/get answered -32602")
    clock.advance(400)
    tenant.tasks.observe_task(
        done.ref, TaskObservation(TaskStatus.WORKING)
    )  # regression -> anomaly
    events = tenant.reads.events(run.ref)
    assert any(e.type == "anomaly" for e in events)
    assert any(e.type == "task.input_required" for e in events)
    input_ref = tenant.reads.input_requests(waiting.ref, pending_only=True)[0].ref
    return Scenario(
        db=db,
        run_ref=run.ref,
        done_ref=done.ref,
        waiting_ref=waiting.ref,
        lost_ref=lost.ref,
        unknown_op=op.ref,
        input_ref=input_ref,
        raw_ids=[raw_done, raw_waiting, raw_lost, key],
        last_seq=events[-1].seq,
    )


def add_orphan(ledger: Ledger, clock: FakeClock) -> tuple[str, str]:
    """A second served run, silent since its one task started working (its harness died):
    orphaned once the wall clock is past the fake one. ``(run_ref, task_ref)``."""
    tenant = ledger.for_principal(PRINCIPAL)
    clock.advance(500)
    run = new_run(tenant, response_id="resp_cli0002", session_id="hsesscli0002")
    task = new_task(tenant, run.ref, task_id="task-orph-" + "d4" * 12, tool="slow_report")
    return run.ref, task.ref


@pytest.fixture
def scenario(sqlite_ledger: Ledger, clock: FakeClock, tmp_path: Path) -> Scenario:
    return populate(sqlite_ledger, clock, tmp_path / "ledger.db")


def cli(scenario: Scenario, *args: str, principal: str = PRINCIPAL) -> Result:
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["--db", str(scenario.db), "--principal", principal, *args],
        env={"COLUMNS": "220", "NO_COLOR": "1", "TERM": "dumb"},
    )
    assert_no_raw_ids(scenario, result.output)
    return result


def assert_no_raw_ids(scenario: Scenario, text: str) -> None:
    for raw in scenario.raw_ids:
        assert raw not in text
    # Not even the distinctive parts of the raw ids.
    for fragment in ("a1a1a1a1", "b2b2b2b2", "c3c3c3c3"):
        assert fragment not in text


def test_runs_lists_counts(scenario: Scenario) -> None:
    result = cli(scenario, "runs")
    assert result.exit_code == 0, result.output
    assert scenario.run_ref in result.output
    assert "resp_cli0001" in result.output
    assert "hsesscli0001" in result.output
    assert "1 lost" in result.output
    assert "1 unknown" in result.output

    data = json.loads(cli(scenario, "runs", "--json").stdout)
    (row,) = data["runs"]
    assert row["run"]["run_ref"] == scenario.run_ref
    assert row["run"]["status"] == "in_progress"
    # The lost task is counted as lost, not as the status it was last seen in (working).
    assert row["counts"]["by_status"] == {"completed": 1, "input_required": 1}
    assert row["counts"]["lost"] == 1
    assert row["counts"]["unknown"] == 1
    assert row["counts"]["total"] == 3

    open_only = json.loads(cli(scenario, "runs", "--open", "--limit", "5", "--json").stdout)
    assert [r["run"]["run_ref"] for r in open_only["runs"]] == [scenario.run_ref]


def test_show_tree_and_json(scenario: Scenario) -> None:
    result = cli(scenario, "show", scenario.run_ref)
    assert result.exit_code == 0, result.output
    out = result.output
    for text in (
        scenario.run_ref,
        scenario.done_ref,
        scenario.waiting_ref,
        scenario.lost_ref,
        scenario.unknown_op,
        scenario.input_ref,
        "reports.generate_report",
        "payments.charge_card",
        "unknown outcome",
        "lost(not_found",
        "elicitation/create",
        "task_status_regression",
    ):
        assert text in out, text

    data = json.loads(cli(scenario, "show", scenario.run_ref, "--json").stdout)
    calls = {c["op_ref"]: c for c in data["calls"]}
    assert calls[scenario.unknown_op]["state"] == "unknown"
    assert calls[scenario.unknown_op]["tasks"] == []
    tasks = {t["task_ref"]: t for c in data["calls"] for t in c["tasks"]}
    assert tasks[scenario.done_ref]["status"] == "completed"
    assert tasks[scenario.done_ref]["has_result"] is True
    assert tasks[scenario.done_ref]["duration_ms"] == 900 + 300 + 500 + 300  # created -> done
    assert tasks[scenario.waiting_ref]["status"] == "input_required"
    (pending,) = tasks[scenario.waiting_ref]["pending_inputs"]
    assert pending == {
        "input_ref": scenario.input_ref,
        "task_ref": scenario.waiting_ref,
        "method": "elicitation/create",
        "first_seen_at": pending["first_seen_at"],
        "answered_at": None,
        "delivered_at": None,
        "question": "Approve 120 EUR?",  # what is asked, so nobody guesses field names
        "fields": [],
        "field_hints": [],
    }
    assert tasks[scenario.lost_ref]["lost_reason"] == "not_found"
    assert tasks[scenario.lost_ref]["verdicts"] == ["lost(not_found: tasks/get answered -32602)"]
    assert [a["event"]["kind"] for a in data["anomalies"]] == ["task_status_regression"]


def test_timeline_terminal_json_and_html(scenario: Scenario, tmp_path: Path) -> None:
    result = cli(scenario, "timeline", scenario.run_ref)
    assert result.exit_code == 0, result.output
    assert "+0.000s" in result.output
    assert "task.input_required" in result.output
    assert "outer" in result.output

    data = json.loads(cli(scenario, "timeline", scenario.run_ref, "--json").stdout)
    lanes = {lane["lane"]: lane for lane in data["lanes"]}
    assert list(lanes) == ["outer", scenario.done_ref, scenario.waiting_ref, scenario.lost_ref]
    assert [s["state"] for s in lanes[scenario.done_ref]["segments"]] == ["working", "completed"]
    assert [s["state"] for s in lanes[scenario.waiting_ref]["segments"]] == [
        "working",
        "input_required",
    ]
    assert lanes[scenario.waiting_ref]["segments"][-1]["open"] is True
    assert [s["state"] for s in lanes[scenario.lost_ref]["segments"]] == ["working", "lost"]
    assert {m["kind"] for m in lanes["outer"]["markers"]} == {"unknown_outcome"}
    assert {m["kind"] for m in lanes[scenario.done_ref]["markers"]} == {"anomaly"}
    assert {m["kind"] for m in lanes[scenario.lost_ref]["markers"]} == {"lost"}
    assert data["events"][0]["rel_ms"] == 0
    # The outer lane carries outer/run events only; task events stay in their task's lane.
    for event in data["events"]:
        if event["type"].startswith("task."):
            assert event["lane"] == event["task_ref"]
        if event["type"].startswith(("outer.", "run.")):
            assert event["lane"] == "outer"

    html = tmp_path / "out" / "timeline.html"
    result = cli(scenario, "timeline", scenario.run_ref, "--html", str(html))
    assert result.exit_code == 0, result.output
    page = html.read_text(encoding="utf-8")
    assert "<svg" in page
    assert "<script" not in page.lower()
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        ENDPOINT, ""
    )
    assert scenario.waiting_ref in page
    assert "approve_payment" in page
    assert 'data-kind="input_required"' in page
    assert 'data-kind="lost"' in page
    assert 'data-kind="anomaly"' in page
    assert_no_raw_ids(scenario, page)


def test_events_in_order_and_after(scenario: Scenario) -> None:
    result = cli(scenario, "events", scenario.run_ref)
    assert result.exit_code == 0, result.output
    assert "run.registered" in result.output
    assert "call.unknown_outcome" in result.output

    everything = json.loads(cli(scenario, "events", scenario.run_ref, "--json").stdout)
    assert [e["seq"] for e in everything] == list(range(1, scenario.last_seq + 1))
    assert everything[0]["type"] == "run.registered"

    tail = json.loads(cli(scenario, "events", scenario.run_ref, "--after", "5", "--json").stdout)
    assert [e["seq"] for e in tail] == list(range(6, scenario.last_seq + 1))

    empty = cli(scenario, "events", scenario.run_ref, "--after", str(scenario.last_seq))
    assert empty.exit_code == 0
    assert "no events" in empty.output


def test_events_follow_prints_and_stops(scenario: Scenario) -> None:
    result = cli(
        scenario,
        "events",
        scenario.run_ref,
        "--after",
        str(scenario.last_seq - 2),
        "--follow",
        "--follow-for",
        "0.6",
        "--json",
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [e["seq"] for e in lines] == [scenario.last_seq - 1, scenario.last_seq]


def test_foreign_principal_sees_nothing(scenario: Scenario) -> None:
    result = cli(scenario, "runs", "--json", principal="globex")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["runs"] == []
    assert "no runs" in cli(scenario, "runs", principal="globex").output
    for command in ("show", "timeline", "events"):
        foreign = cli(scenario, command, scenario.run_ref, principal="globex")
        assert foreign.exit_code == 1
        assert "not found for this principal" in foreign.output
        assert "Traceback" not in foreign.output


def test_clear_errors_without_schema_or_principal(tmp_path: Path) -> None:
    runner = CliRunner()
    empty = tmp_path / "empty.db"
    empty.touch()
    result = runner.invoke(app, ["--db", str(empty), "--principal", PRINCIPAL, "runs"])
    assert result.exit_code == 1
    assert "db upgrade" in result.output
    assert "Traceback" not in result.output

    missing = tmp_path / "missing.db"
    result = runner.invoke(app, ["--db", str(missing), "--principal", PRINCIPAL, "runs"])
    assert result.exit_code == 1
    assert "db upgrade" in result.output
    assert not missing.exists()  # a read command never creates a ledger

    result = runner.invoke(app, ["--db", str(empty), "runs"], env={"BRIDGE_PRINCIPAL": ""})
    assert result.exit_code == 1
    assert "principal" in result.output


def test_env_vars_select_db_and_principal(scenario: Scenario) -> None:
    result = CliRunner().invoke(
        app,
        ["runs", "--json"],
        env={"BRIDGE_DB": str(scenario.db), "BRIDGE_PRINCIPAL": PRINCIPAL},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"][0]["run"]["run_ref"] == scenario.run_ref


def test_db_upgrade_on_empty_sqlite_file(tmp_path: Path) -> None:
    from bridge._ledger.schema import migrate

    db = tmp_path / "fresh.db"
    db.touch()
    runner = CliRunner()
    result = runner.invoke(app, ["--db", str(db), "db", "upgrade"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    head = migrate.head_revision()
    assert head is not None and head in result.output
    again = runner.invoke(app, ["--db", str(db), "db", "upgrade"], env={"COLUMNS": "200"})
    assert again.exit_code == 0
    assert "already at" in again.output
    runs = runner.invoke(app, ["--db", str(db), "--principal", PRINCIPAL, "runs", "--json"])
    assert runs.exit_code == 0
    assert json.loads(runs.stdout)["runs"] == []


def test_mcp_config_and_credential_names(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": [
                    {
                        "name": "reports",
                        "url": "http://127.0.0.1:9/mcp",
                        "enabled": True,
                        "auth": {"credential_ref": "reports-token.v1"},
                    },
                    {"name": "off", "url": "http://127.0.0.1:9/off", "enabled": False},
                ]
            }
        )
    )
    servers = load_mcp_config(config)
    assert [(s.name, s.enabled, s.credential_ref) for s in servers] == [
        ("reports", True, "reports-token.v1"),
        ("off", False, None),
    ]
    assert credential_env_name("reports-token.v1") == "BRIDGE_CREDENTIAL_REPORTS_TOKEN_V1"


def test_cancel_and_answer_record_intent_without_a_reachable_server(
    scenario: Scenario, tmp_path: Path
) -> None:
    """No server is configured for the tasks' endpoint: the intent and the answer are still
    recorded first, and the CLI reports that the server did not acknowledge."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": []}))
    result = cli(scenario, "cancel-task", scenario.lost_ref, "--mcp-config", str(config), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "task_ref": scenario.lost_ref,
        "cancel_recorded": True,
        "acknowledged": False,
    }
    done = cli(scenario, "cancel-task", scenario.done_ref, "--mcp-config", str(config))
    assert done.exit_code == 1
    assert "already completed" in done.output

    answered = cli(
        scenario,
        "answer",
        scenario.waiting_ref,
        scenario.input_ref,
        "--decline",
        "--mcp-config",
        str(config),
    )
    assert answered.exit_code == 0, answered.output
    assert "NOT yet delivered" in answered.output
    again = cli(
        scenario,
        "answer",
        scenario.waiting_ref,
        scenario.input_ref,
        "--dismiss",
        "--mcp-config",
        str(config),
    )
    assert again.exit_code == 1
    assert "InputAlreadyAnswered" in again.output
    types = [
        e["type"] for e in json.loads(cli(scenario, "events", scenario.run_ref, "--json").stdout)
    ]
    assert "task.cancel_requested" in types
    assert "task.input_answered" in types


def test_recover_prints_report(scenario: Scenario, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": []}))
    result = cli(scenario, "recover", "--mcp-config", str(config), "--wait", "0.3", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["tasks_watched"] == 1  # the input_required one (lost and done are closed)
    assert report["calls_marked_unknown"] == 0
    assert [p["input_ref"] for p in report["pending_inputs"]] == [scenario.input_ref]
    assert report["served_runs_open"] == [scenario.run_ref]
    assert [(t["task_ref"], t["status"]) for t in report["tasks"]] == [
        (scenario.waiting_ref, "input_required")
    ]
    text = cli(scenario, "recover", "--mcp-config", str(config))
    assert text.exit_code == 0, text.output
    assert "Recovery report" in text.output


def test_python_dash_m_entry_point(scenario: Scenario) -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "bridge.cli"),
            *("--db", str(scenario.db), "--principal", PRINCIPAL),
            *("show", scenario.run_ref, "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["run"]["run_ref"] == scenario.run_ref
    assert_no_raw_ids(scenario, result.stdout + result.stderr)


def test_html_timeline_renders_in_headless_chromium(scenario: Scenario, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is required in CI")
        pytest.skip(f"{CHROMIUM} not installed")
    html = tmp_path / "timeline.html"
    assert cli(scenario, "timeline", scenario.run_ref, "--html", str(html)).exit_code == 0
    shot = tmp_path / "shot.png"
    profile = tmp_path / "chromium-profile"
    subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--window-size=1400,900",
            f"file://{html}",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert shot.exists(), "chromium wrote no screenshot"
    assert shot.stat().st_size > 5 * 1024
    shutil.rmtree(profile, ignore_errors=True)
