"""The operator's loop from the terminal alone: ``bridge attention`` lists what waits (an input,
an unknown outcome, a lost task, an anomaly, an orphaned run), then ``resolve``, ``ack``,
``answer`` and ``close-run`` act on each, and each item leaves; ``show`` prints what is asked
and who gave each verdict; every table stays whole at 80 columns and when piped."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from bridge._ledger.store import Ledger
from bridge._lifecycle import CallState, OuterStatus, TaskStatus
from bridge.cli._app import app
from tests.conftest import FakeClock
from tests.support.builders import ENDPOINT, new_run
from tests.support.processes import REPO_ROOT
from tests.test_cli import PRINCIPAL, Scenario, add_orphan, assert_no_raw_ids, populate


@pytest.fixture
def scenario(sqlite_ledger: Ledger, clock: FakeClock, tmp_path: Path) -> Scenario:
    # The fake clock stands months before the wall clock the CLI reads: the input is overdue.
    # The run is as silent, but waits on a person: listed by those items, not as orphaned.
    return populate(sqlite_ledger, clock, tmp_path / "ledger.db")


@pytest.fixture
def orphan(scenario: Scenario, sqlite_ledger: Ledger, clock: FakeClock) -> tuple[str, str]:
    """A second served run, silent since its task started, waiting on nobody: orphaned."""
    return add_orphan(sqlite_ledger, clock)


def cli(scenario: Scenario, *args: str, columns: int = 80) -> Result:
    result = CliRunner().invoke(
        app,
        ["--db", str(scenario.db), "--principal", PRINCIPAL, *args],
        env={"COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb"},
    )
    assert_no_raw_ids(scenario, result.output)
    return result


def _items(scenario: Scenario) -> list[tuple[str, str]]:
    result = cli(scenario, "attention", "--json")
    assert result.exit_code == 0, result.output
    return [(i["kind"], i["ref"]) for i in json.loads(result.stdout)["items"]]


def test_attention_then_act_from_the_terminal_alone(
    scenario: Scenario, orphan: tuple[str, str]
) -> None:
    anomaly = f"{scenario.run_ref}:{scenario.last_seq}"
    assert _items(scenario) == [
        ("input_overdue", scenario.input_ref),
        ("unknown_outcome", scenario.unknown_op),
        ("lost_task", scenario.lost_ref),
        ("anomaly", anomaly),
        ("orphaned_run", orphan[0]),
    ]
    text = " ".join(cli(scenario, "attention").output.split())  # wrapped at 80 columns
    for ref in (scenario.input_ref, scenario.unknown_op, scenario.lost_ref, anomaly):
        assert ref in text
    assert "Approve 120 EUR?" in text and f"bridge resolve {scenario.unknown_op}" in text
    assert "…" not in text.replace("'{…}'", "").replace("'…'", "")  # nothing cut

    refused = cli(scenario, "resolve", scenario.unknown_op)
    assert refused.exit_code == 1 and "exactly one of --ran, --never-ran" in refused.output
    done = cli(scenario, "resolve", scenario.unknown_op, "--never-ran", "--by", "alice")
    assert done.exit_code == 0, done.output
    again = cli(scenario, "resolve", scenario.unknown_op, "--ran")
    assert again.exit_code == 1 and "already resolved as not_admitted" in again.output
    assert cli(scenario, "ack", scenario.lost_ref, "--note", "never charged").exit_code == 0
    assert cli(scenario, "ack", anomaly, "--by", "bob").exit_code == 0
    not_lost = cli(scenario, "ack", scenario.done_ref)
    assert not_lost.exit_code == 1 and "not lost" in not_lost.output
    assert [kind for kind, _ in _items(scenario)] == ["input_overdue", "orphaned_run"]

    show = " ".join(cli(scenario, "show", scenario.run_ref).output.split())
    assert "asks: Approve 120 EUR?" in show
    assert "verdict: never ran (by alice)" in show and "acknowledged by cli" in show

    ledger = Ledger.open(scenario.db)
    try:
        tenant = ledger.for_principal(PRINCIPAL)
        [checked] = [
            e for e in tenant.reads.events(scenario.run_ref) if e.type.endswith("_checked")
        ]
        assert checked.model_dump()["by"] == "alice"  # the event says who gave the verdict
    finally:
        ledger.close()


def test_a_verdict_is_said_where_the_run_stands_not_unresolved(scenario: Scenario) -> None:
    """After ``resolve``, ``show`` and ``runs`` say what the verdict settled: the call never
    ran (or ran), no longer one more ``unresolved`` call, nor one more ``unknown``."""

    def standing() -> tuple[str, dict[str, int]]:
        shown = json.loads(cli(scenario, "show", scenario.run_ref, "--json").stdout)
        (row,) = json.loads(cli(scenario, "runs", "--json").stdout)["runs"]
        assert row["run"]["status_line"] == shown["run"]["status_line"]
        counts = {k: row["counts"][k] for k in ("unknown", "resolved")}
        return shown["run"]["status_line"], counts

    line, counts = standing()
    assert "2 unresolved" in line and counts == {"unknown": 1, "resolved": 0}
    done = cli(scenario, "resolve", scenario.unknown_op, "--never-ran", "--by", "alice")
    assert done.exit_code == 0, done.output
    line, counts = standing()
    assert "1 unresolved, 1 never ran (verdict)" in line  # the lost task is still unresolved
    assert counts == {"unknown": 0, "resolved": 1}
    text = " ".join(cli(scenario, "show", scenario.run_ref).output.split())
    assert "1 never ran (verdict)" in text and "verdict: never ran (by alice)" in text
    runs = " ".join(cli(scenario, "runs").output.split())
    assert "1 resolved" in runs and "unknown" not in runs


def test_closing_an_orphaned_run_from_the_terminal_leaves_its_tasks(
    scenario: Scenario, orphan: tuple[str, str]
) -> None:
    run_ref, task_ref = orphan
    assert ("orphaned_run", run_ref) in _items(scenario)
    bad = cli(scenario, "close-run", run_ref, "--status", "done", "--reason", "x")
    assert bad.exit_code == 1 and "--status must be one of" in bad.output
    closed = cli(
        scenario, "close-run", run_ref, "--status", "failed",
        "--reason", "harness host decommissioned", "--json",
    )  # fmt: skip
    assert closed.exit_code == 0, closed.output
    assert json.loads(closed.stdout)["status"] == "failed"
    assert ("orphaned_run", run_ref) not in _items(scenario)
    ledger = Ledger.open(scenario.db)
    try:
        tenant = ledger.for_principal(PRINCIPAL)
        assert tenant.reads.get_run(run_ref).status is OuterStatus.FAILED
        working = tenant.reads.get_task(task_ref)
        assert working.is_open and working.status is TaskStatus.WORKING
        assert working.cancel_requested_at_ms is None
    finally:
        ledger.close()
    events = json.loads(cli(scenario, "events", run_ref, "--json").stdout)
    assert events[-1]["type"] == "outer.closed_by_operator"
    assert "harness host decommissioned" in events[-1]["summary"]


def _other_principals_call(sqlite_ledger: Ledger, principal: str) -> str:
    """A call of unknown outcome in a run of another principal, on the same ledger."""
    tenant = sqlite_ledger.for_principal(principal)
    run = new_run(tenant, response_id=f"resp_{principal}")
    op = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, server_name="pay", tool_name="charge", arguments={}
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    tenant.calls.mark_dispatch_unknown(op.ref, "connection reset before a reply")
    return op.ref


def test_attention_across_principals_is_scoped_as_the_api_is(
    scenario: Scenario, sqlite_ledger: Ledger
) -> None:
    """Several principals' items in one list (``-p`` repeated, or ``--all-principals`` for
    an operator who owns the ledger), each naming its principal; a principal not named is
    never read, and acting still goes through each item's own principal."""
    beta_op = _other_principals_call(sqlite_ledger, "beta")
    gamma_op = _other_principals_call(sqlite_ledger, "gamma")

    def listed(*args: str) -> dict[str, object]:
        result = cli(scenario, "attention", "--json", *args)
        assert result.exit_code == 0, result.output
        data: dict[str, object] = json.loads(result.stdout)
        return data

    alone = listed()
    assert alone["principals"] == [PRINCIPAL] and alone["principal"] == PRINCIPAL
    assert {i["principal"] for i in alone["items"]} == {PRINCIPAL}  # type: ignore[attr-defined]
    two = listed("-p", "beta")
    assert two["principals"] == [PRINCIPAL, "beta"] and "principal" not in two
    by_ref = {i["ref"]: i["principal"] for i in two["items"]}  # type: ignore[attr-defined]
    assert by_ref[beta_op] == "beta" and gamma_op not in by_ref  # gamma was not named
    assert by_ref[scenario.unknown_op] == PRINCIPAL
    assert sorted(by_ref.values()).count("beta") == 1  # its call (its run waits on it)
    every = listed("--all-principals")
    assert every["principals"] == [PRINCIPAL, "beta", "gamma"]
    refs = [i["ref"] for i in every["items"]]  # type: ignore[attr-defined]
    assert {beta_op, gamma_op} <= set(refs) and len(refs) == len(by_ref) + 1
    assert [i["since_ms"] for i in every["items"]] == sorted(  # type: ignore[attr-defined]
        i["since_ms"]
        for i in every["items"]  # type: ignore[attr-defined]
    )  # one list, oldest first, across principals
    both = cli(scenario, "attention", "--all-principals", "-p", "beta")
    assert both.exit_code == 1 and "not both" in both.output

    text = " ".join(cli(scenario, "attention", "-p", "beta").output.split())
    assert f"[beta] unknown_outcome {beta_op}" in text and f"[{PRINCIPAL}]" in text
    # Acting is scoped to one principal: acme cannot resolve beta's call.
    foreign = cli(scenario, "resolve", beta_op, "--ran")
    assert foreign.exit_code == 1 and "not found for this principal" in foreign.output
    result = CliRunner().invoke(
        app, ["--db", str(scenario.db), "--principal", "beta", "resolve", beta_op, "--ran"]
    )
    assert result.exit_code == 0, result.output
    assert beta_op not in {i["ref"] for i in listed("--all-principals")["items"]}  # type: ignore[attr-defined]


def _piped(scenario: Scenario, *command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "--db", str(scenario.db),
         "--principal", PRINCIPAL, *command],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert_no_raw_ids(scenario, done.stdout)
    return done.stdout


def test_runs_and_attention_are_whole_when_piped(scenario: Scenario) -> None:
    """Piped, rich renders 80 columns: every reference and status must still be there whole."""
    for command in (["attention"], ["show", scenario.run_ref]):
        out = _piped(scenario, *command)
        assert max(len(line) for line in out.splitlines()) <= 80
        assert scenario.run_ref in out
    runs = _piped(scenario, "runs")
    assert max(len(line) for line in runs.splitlines()) <= 80
    for whole in (scenario.run_ref, "resp_cli0001", "hsesscli0001", "in_progress", "1 lost"):
        assert whole in runs
    assert "1 input_required" in runs and "…" not in runs


def test_attention_follow_prints_items_as_they_come_and_go(
    scenario: Scenario, orphan: tuple[str, str]
) -> None:
    result = cli(scenario, "attention", "--follow", "--follow-for", "0.3", "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0]["kind"] == "input_overdue"
    assert len({(line["kind"], line["ref"]) for line in lines}) == len(lines) == 5


def test_recover_leaves_calls_in_flight_alone_unless_asked_and_wait_ends_once_settled(
    sqlite_ledger: Ledger, tmp_path: Path
) -> None:
    """Another process may still be dispatching: a call left ``sent`` is only marked unknown
    with --settle-in-flight; --wait returns at once when nothing is open."""
    tenant = sqlite_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    op = tenant.calls.begin_dispatch(
        run.ref, server_endpoint=ENDPOINT, server_name="pay", tool_name="charge", arguments={}
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": []}))
    db = str(tmp_path / "ledger.db")

    def recover(*more: str) -> dict[str, object]:
        result = CliRunner().invoke(
            app,
            ["--db", db, "--principal", PRINCIPAL, "recover", "--mcp-config", str(config),
             "--json", *more],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        report: dict[str, object] = json.loads(result.stdout)
        return report

    started = time.monotonic()
    report = recover("--wait", "60")
    assert time.monotonic() - started < 30  # nothing open: no waiting out the 60 s
    assert report["calls_marked_unknown"] == 0 and report["settled"] is True
    assert isinstance(report["took_s"], float) and report["took_s"] < 30
    assert tenant.reads.get_dispatch(op.ref).state is CallState.SENT
    assert recover("--settle-in-flight")["calls_marked_unknown"] == 1
    assert tenant.reads.get_dispatch(op.ref).state is CallState.UNKNOWN
