"""A bad answer to an input request sends nothing, from every entry that answers one: the API
(``InputRequest.accept``), the CLI (``bridge answer --content`` / ``--accept``) and the web
console's form. A value of the wrong type and a field the schema does not name are refused
alike, naming the field, against the example payments server (a real process whose payment
runs only on an accepted answer); the request stays answerable. The example harness's UHP
input endpoint: tests/test_mrtr_operator_paths.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from typer.testing import CliRunner, Result

from bridge import Bridge, BridgeSettings, McpServerConfig, TaskPending, WaitMode
from bridge.cli._app import app
from bridge.errors import InvalidAnswer
from tests.support.bridging import FAST, event_types, served_run, wait_until
from tests.support.console import base_url, console_process
from tests.support.example_servers import PAYMENTS_MODULE
from tests.support.processes import ServerProcess
from tests.test_console_browser import payments_recorded

pytestmark = pytest.mark.anyio

P = "acme"
KEY = "pay-bad-answers"
ARGS = {"amount": 120, "currency": "EUR", "payee": "ACME Corp", "payment_key": KEY}
CONSOLE_TOKENS = {P: "acme-console-token-bad-answers-1f9e"}
# (what is posted, the field the refusal must name)
BAD_CONTENT = [({"approve": "yes"}, "approve"), ({"approve": True, "colour": "red"}, "colour")]


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    ledger = tmp_path / "payments.db"
    with ServerProcess(PAYMENTS_MODULE, args=["--ledger", str(ledger)]) as proc:
        yield proc, ledger


def _cli(db: Path, config: Path, *args: str) -> Result:
    return CliRunner().invoke(
        app,
        ["--db", str(db), "--principal", P, "answer", *args, "--mcp-config", str(config)],
        env={"COLUMNS": "220", "NO_COLOR": "1", "TERM": "dumb"},
    )


async def test_a_bad_answer_sends_nothing_from_any_entry(
    tmp_path: Path, payments: tuple[ServerProcess, Path]
) -> None:
    server, payments_db = payments
    db = tmp_path / "ledger.db"
    servers = [McpServerConfig(name="payments", url=server.url)]
    settings = BridgeSettings(ledger_url=db, principals=[P], mcp_servers=servers, scheduler=FAST)
    async with Bridge.open(settings) as bridge:
        run = bridge.run(P, await served_run(bridge, P))
        step = await run.call_tool("payments", "approve_payment", ARGS, wait=WaitMode.DETACH)
        assert isinstance(step, TaskPending)
        [request] = await wait_until(run.pending_inputs, timeout=60, what="approval asked")
        assert request.task_ref is not None
        owner, input_ref = request.task_ref, request.input_ref
        tenant = bridge._ledger.for_principal(P)

        async def nothing_sent() -> None:
            [still] = await run.pending_inputs()
            assert still.input_ref == input_ref
            assert "task.input_answered" not in event_types(tenant, run.ref)
            assert payments_recorded(payments_db, KEY) == 0

        # The API.
        for content, field in BAD_CONTENT:
            with pytest.raises(InvalidAnswer) as refused:
                await request.accept(content)
            assert any(p.startswith(f"{field}:") for p in refused.value.problems)
        await nothing_sent()

        # The CLI (its own process's event loop: run off this one's).
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": [{"name": "payments", "url": server.url}]}))
        attempts = [(["--content", json.dumps(c)], f) for c, f in BAD_CONTENT]
        attempts.append((["--accept", "approve=true", "--accept", "colour=red"], "colour"))
        for args, field in attempts:
            result = await anyio.to_thread.run_sync(_cli, db, config, owner, input_ref, *args)
            assert result.exit_code == 1, result.output
            assert "InvalidAnswer" in result.output and f"{field}:" in result.output
        await nothing_sent()

        # The console's form (a field it did not draw is posted too).
        mcp = {"payments": server.url}
        with console_process(tmp_path, db, CONSOLE_TOKENS, mcp_servers=mcp) as console:
            headers = {"Authorization": f"Bearer {CONSOLE_TOKENS[P]}"}
            async with httpx.AsyncClient(
                base_url=base_url(console), headers=headers, timeout=30
            ) as http:
                inbox = (await http.get("/inbox")).text
                match = re.search(r'name="csrf-token" content="([^"]+)"', inbox)
                assert match is not None
                url = f"/runs/{run.ref}/inputs/{owner}/{input_ref}/answer"
                for posted, named in (
                    ({"f.approve": "maybe"}, 'data-field-error="approve"'),
                    ({"f.approve": "true", "f.colour": "red"}, "colour: no such field"),
                ):
                    form = {"csrf": match.group(1), "action": "accept", **posted}
                    page = await http.post(url, data=form)
                    assert page.status_code == 422, page.text
                    assert named in page.text
        await nothing_sent()

        # Still answerable: the checked answer goes through, and the payment runs once.
        receipt = await request.accept({"approve": True})
        assert receipt.delivered
        await wait_until(lambda: payments_recorded(payments_db, KEY) == 1, timeout=60, what="paid")
