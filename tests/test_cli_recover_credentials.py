"""``bridge recover`` of an open task whose server rejects the bridge's credential: reported by
server (status, open tasks) and a non-zero exit, never a clean report showing the task
"working" as if it had been watched. Against the package's example task server as a real
process, behind a bearer token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode
from bridge._mcp.config_file import credential_env_name
from bridge.cli._app import app
from tests.support.processes import ServerProcess

TOKEN = "reports-secret"
PRINCIPAL = "acme"
# Long enough to stay open through every recover below.
SLOW_REPORT = {"quarter": "Q4", "sections": 2, "seconds_per_section": 30}


@pytest.fixture(scope="module")
def task_server() -> Iterator[ServerProcess]:
    with ServerProcess("bridge.testing.server", args=["--token", TOKEN]) as server:
        yield server


@pytest.fixture
def ledger_with_an_open_task(tmp_path: Path, task_server: ServerProcess) -> Path:
    import anyio

    db = tmp_path / "ledger.db"
    config = McpServerConfig(name="reports", url=task_server.url, credential_ref="reports")

    async def detach_a_task() -> None:
        settings = BridgeSettings(
            ledger_url=str(db),
            principals=[PRINCIPAL],
            mcp_servers=[config],
            credentials=lambda _ref: TOKEN,
        )
        async with Bridge.open(settings) as bridge:
            run = await bridge.register_served_run(
                PRINCIPAL, response_id="resp_r1", session_id="hsess_r1", harness_id="chrn_r"
            )
            await run.call_tool("reports", "generate_report", SLOW_REPORT, wait=WaitMode.DETACH)

    anyio.run(detach_a_task)
    (tmp_path / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": [
                    {
                        "name": "reports",
                        "url": task_server.url,
                        "auth": {"credential_ref": "reports"},
                    }
                ]
            }
        )
    )
    return db


def _recover(db: Path, token: str, *extra: str) -> object:
    return CliRunner().invoke(
        app,
        [
            *("--db", str(db), "--principal", PRINCIPAL, "recover"),
            *("--mcp-config", str(db.parent / "mcp.json"), "--wait", "0.5", *extra),
        ],
        env={"COLUMNS": "220", "NO_COLOR": "1", credential_env_name("reports"): token},
    )


def test_a_rejected_credential_is_reported_and_fails_the_recover(
    ledger_with_an_open_task: Path,
) -> None:
    db = ledger_with_an_open_task
    refused = _recover(db, "not-the-token", "--json")
    assert refused.exit_code == 1, refused.output
    report = json.loads(refused.stdout)
    [server] = report["servers_refusing_credentials"]
    assert (server["server"], server["status"], len(server["tasks"])) == ("reports", 401, 1)
    assert "credentials rejected by reports (401, 1 open task(s))" in refused.output
    assert "not-the-token" not in refused.output
    text = _recover(db, "not-the-token")
    assert text.exit_code == 1 and "Recovery report" in text.output
    assert "credentials rejected by reports" in text.output
    # The right credential: the same recover is clean.
    fixed = _recover(db, TOKEN, "--json")
    assert fixed.exit_code == 0, fixed.output
    assert json.loads(fixed.stdout)["servers_refusing_credentials"] == []
