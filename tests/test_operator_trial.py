"""The operator's trial (docs/trials/operator-loop.md) as one scripted pass from the terminal
alone: a pending input, a lost task, an unknown outcome and an orphaned run, set up with real
servers and a SIGKILLed harness (:mod:`tests.support.operator_trial`), each worked with
``bridge`` commands only, until ``bridge attention`` is empty; the payment made once, the
order's verdict right, the orphan's inner task left alone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from bridge._ledger.reads.views import TaskView
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus, TaskStatus
from bridge.cli._app import app
from tests.support.operator_trial import P, mcp_config, stage, trial_servers

pytestmark = pytest.mark.e2e


def test_the_four_situations_worked_from_the_terminal_alone(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.db")
    with trial_servers(tmp_path) as procs:
        staged = asyncio.run(stage(db, procs))
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps(mcp_config(procs)))
        env = {"BRIDGE_DB": db, "BRIDGE_PRINCIPAL": P, "BRIDGE_MCP_CONFIG": str(config)}

        def bridge(*args: str) -> Result:
            done = CliRunner().invoke(app, list(args), env={**env, "COLUMNS": "80"})
            assert done.exit_code == 0, done.output
            return done

        def waiting() -> list[tuple[str, str]]:
            # --orphan-after 0: a silent served run waiting on nobody is orphaned at once
            out: dict[str, Any] = json.loads(
                bridge("attention", "--json", "--orphan-after", "0").stdout
            )
            return [(i["kind"], i["ref"]) for i in out["items"]]

        assert waiting() == [
            ("input_waiting", staged.input_ref),
            ("lost_task", staged.lost_task),
            ("unknown_outcome", staged.unknown_op),
            ("orphaned_run", staged.orphan_run),  # the others wait on a person: not orphaned
        ]
        text = " ".join(bridge("attention").output.split())
        assert "Pay 120 to ACME GmbH?" in text and "fields: approve (boolean, required)" in text

        (pay_task,) = json.loads(bridge("show", staged.pay_run, "--json").stdout)["calls"][0][
            "tasks"
        ]
        refused = CliRunner().invoke(
            app,
            ["answer", pay_task["task_ref"], staged.input_ref, "--accept", "approve=perhaps"],
            env=env,
        )
        assert refused.exit_code == 1 and "choose yes/true or no/false" in refused.output
        bridge("answer", pay_task["task_ref"], staged.input_ref, "--accept", "approve=yes")
        assert (tmp_path / "orders.log").read_text().splitlines() == ["order chair"]  # it ran
        bridge("resolve", staged.unknown_op, "--ran", "--by", "alice")
        bridge("ack", staged.lost_task, "--note", "server restarted: no effect", "--by", "alice")
        bridge("close-run", staged.orphan_run, "--status", "failed", "--reason", "harness killed")
        orphan_task = _task(db, staged.orphan_task)  # closing the run left its task alone
        assert orphan_task.status is TaskStatus.WORKING and orphan_task.is_open
        assert orphan_task.cancel_requested_at_ms is None
        bridge("cancel-task", staged.orphan_task)  # nobody needs its work: a separate act
        report = json.loads(bridge("recover", "--json", "--wait", "60").stdout)
        statuses = {t["task_ref"]: t["status"] for t in report["tasks"]}
        assert statuses[pay_task["task_ref"]] == "completed"  # paid, once the answer arrived

        # Acting was the runs' last news: now silent, waiting on nobody, they are orphaned.
        left = waiting()
        assert sorted(left) == sorted(
            ("orphaned_run", run) for run in (staged.pay_run, staged.job_run, staged.order_run)
        )
        ends = {staged.pay_run: "completed", staged.job_run: "failed"}
        for run in (staged.pay_run, staged.job_run, staged.order_run):
            ended = ends.get(run, "incomplete")
            bridge("close-run", run, "--status", ended, "--reason", "harness gone")
        assert waiting() == []

    ledger = Ledger.open(db)
    try:
        tenant = ledger.for_principal(P)
        assert tenant.reads.get_task(pay_task["task_ref"]).status is TaskStatus.COMPLETED
        assert tenant.reads.get_run(staged.pay_run).status is OuterStatus.COMPLETED
        assert tenant.reads.get_run(staged.order_run).status is OuterStatus.INCOMPLETE
        assert tenant.reads.get_task(staged.orphan_task).status is TaskStatus.CANCELLED
    finally:
        ledger.close()


def _task(db: str, task_ref: str) -> TaskView:
    ledger = Ledger.open(db)
    try:
        return ledger.for_principal(P).reads.get_task(task_ref)
    finally:
        ledger.close()
