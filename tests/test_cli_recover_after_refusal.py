"""From the terminal alone, against a real Tasks server, on SQLite and PostgreSQL: an answer
the bridge refuses (``bridge answer`` with a value its schema rejects) is neither recorded nor
sent, so ``bridge recover`` afterwards sends nothing either (the server's own log of what it
received shows no ``tasks/update``); the corrected answer is then taken, and paid once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode
from bridge._ledger.store import Ledger
from bridge._runtime.step_results import TaskPending
from tests.support.bridging import FAST, effects, wait_until
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
LEDGERS = ["wall_ledger", "wall_pg_ledger"]


def _methods(path: Path) -> list[str]:
    """The JSON-RPC methods the server received, in order."""
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("ledger_fixture", LEDGERS)
async def test_recover_from_the_terminal_after_a_refused_answer_sends_nothing(
    ledger_fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    ledger: Ledger = request.getfixturevalue(ledger_fixture)
    db = ledger.engine.url.render_as_string(hide_password=False)
    effects_file, methods_file = tmp_path / "effects.log", tmp_path / "methods.log"
    server_args = ["--effects-file", str(effects_file), "--methods-file", str(methods_file)]
    with ServerProcess("tests.servers.tasks_server", args=server_args) as server:
        settings = BridgeSettings(
            principals=[P], mcp_servers=[McpServerConfig(name="pay", url=server.url)],
            scheduler=FAST,
        )  # fmt: skip
        async with Bridge(ledger, settings) as bridge:  # the harness's process: it asks, ends
            run = await bridge.register_served_run(
                P, response_id="resp_refused", session_id=None, harness_id=None
            )
            args = {"amount": 120, "payment_key": "pay-cli"}
            handle = await run.call_tool("pay", "approve_payment", args, wait=WaitMode.DETACH)
            assert isinstance(handle, TaskPending)
            (asked,) = await wait_until(run.pending_inputs, timeout=30, what="the question")
        task_ref, input_ref = handle.task.ref, asked.input_ref
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": [{"name": "pay", "url": server.url}]}))

        def bridge_cli(*command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "bridge.cli", "--db", db, "--principal", P, *command],
                capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT,
            )  # fmt: skip

        def recover(wait: float) -> dict[str, Any]:
            done = bridge_cli("recover", "--mcp-config", str(config), "--json", "--wait", str(wait))
            assert done.returncode == 0, done.stderr
            report: dict[str, Any] = json.loads(done.stdout)
            return report

        def answer(*how: str) -> subprocess.CompletedProcess[str]:
            return bridge_cli("answer", task_ref, input_ref, "--mcp-config", str(config), *how)

        refused = answer("--accept", "approve=perhaps")
        assert refused.returncode == 1 and "approve" in refused.stderr, refused.stderr
        assert "tasks/update" not in _methods(methods_file)

        # Recovery watches the task (it polls) yet has no answer to send: none was recorded.
        polls_before = _methods(methods_file).count("tasks/get")
        report = recover(wait=3)
        assert report["answers_to_redeliver"] == 0 and report["settled"] is False
        assert [r["input_ref"] for r in report["pending_inputs"]] == [input_ref]
        assert [t["status"] for t in report["tasks"]] == ["input_required"]
        assert _methods(methods_file).count("tasks/get") > polls_before
        assert "tasks/update" not in _methods(methods_file)  # nothing was sent
        listed = json.loads(bridge_cli("attention", "--json").stdout)["items"]
        assert [(i["kind"], i["ref"]) for i in listed] == [("input_waiting", input_ref)]

        taken = answer("--accept", "approve=true", "--json")
        assert taken.returncode == 0, taken.stderr
        assert _methods(methods_file).count("tasks/update") == 1
        report = recover(wait=120)  # returns once the task has settled
        assert report["settled"] is True, report
        assert [t["status"] for t in report["tasks"]] == ["completed"], report
        assert _methods(methods_file).count("tasks/update") == 1  # the one answer, once
        assert json.loads(bridge_cli("attention", "--json").stdout)["items"] == []
    assert effects(effects_file) == ["payment pay-cli 120"]
