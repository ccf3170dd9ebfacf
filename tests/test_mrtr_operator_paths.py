"""An MRTR input (a call's, ``op_ref``, before any task) answered by an operator: through the
``bridge answer`` CLI, and through the example harness's vendor endpoint
(``POST /v1/responses/{id}/mcp_inputs`` with ``op_ref``) — both against the official SDK's
MRTR server (tests/servers/mrtr_server.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from typer.testing import CliRunner

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode
from bridge._ledger.store import Ledger
from bridge._lifecycle import CallState
from bridge._outcomes import InputPending
from bridge.cli._app import app
from tests.support.bridging import FAST, effects
from tests.support.builders import new_run
from tests.support.processes import ServerProcess

P = "acme"
TOKEN = "mrtr-operator-token"
YES = {"action": "accept", "content": {"approve": True}}


@pytest.fixture(scope="module")
def mrtr_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    effects_path = tmp_path_factory.mktemp("mrtr") / "effects.log"
    server = ServerProcess("tests.servers.mrtr_server", args=["--effects-file", str(effects_path)])
    server.effects_path = effects_path  # type: ignore[attr-defined]
    with server:
        yield server


def _asking_call(db: Path, server: ServerProcess, amount: int) -> tuple[str, str]:
    """A call left waiting for the host's answer (form elicitations are the host's by
    default): its op_ref and its input's reference."""

    async def call() -> tuple[str, str]:
        ledger = Ledger.open(db)
        servers = [McpServerConfig(name="mrtr", url=server.url)]
        try:
            async with Bridge(
                ledger, BridgeSettings(principals=[P], mcp_servers=servers, scheduler=FAST)
            ) as b:
                run = new_run(ledger.for_principal(P))
                pending = await b.run(P, run.ref).call_tool(
                    "mrtr", "approve_payment", {"amount": amount}, wait=WaitMode.WAIT
                )
        finally:
            ledger.close()
        assert isinstance(pending, InputPending)
        return pending.op_ref, pending.inputs[0].input_ref

    return anyio.run(call)


def _cli(db: Path, *args: str, principal: str = P) -> Any:
    return CliRunner().invoke(
        app,
        ["--db", str(db), "--principal", principal, *args],
        env={"COLUMNS": "220", "NO_COLOR": "1", "TERM": "dumb"},
    )


def test_the_cli_answers_a_calls_input_by_op_ref(
    tmp_path: Path, mrtr_server: ServerProcess
) -> None:
    db = tmp_path / "ledger.db"
    op_ref, input_ref = _asking_call(db, mrtr_server, 31)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": [{"name": "mrtr", "url": mrtr_server.url}]}))
    answer = ["answer", op_ref, input_ref, "--accept", "approve=true", "--mcp-config", str(config)]
    foreign = _cli(db, *answer, principal="mallory")
    assert foreign.exit_code == 1 and "not found for this principal" in foreign.output
    result = _cli(db, *answer, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "op_ref": op_ref,
        "input_ref": input_ref,
        "recorded": True,
        "delivered": True,
        "delivery": "retried",
    }
    ledger = Ledger.open(db)
    try:
        dispatch = ledger.for_principal(P).reads.get_dispatch(op_ref)
    finally:
        ledger.close()
    assert dispatch.state is CallState.RESULT
    assert dispatch.result["content"][0]["text"] == "paid 31"
    again = _cli(db, *answer)
    assert again.exit_code == 1 and "InputAlreadyAnswered" in again.output


@pytest.fixture
def harness(tmp_path: Path, mrtr_server: ServerProcess) -> Iterator[ServerProcess]:
    config = {
        "harnesses": [
            {
                "id": "chrn_mrtr",
                "base": "scripted",
                "model": "scripted-1",
                "mcpServers": [{"name": "mrtr", "url": mrtr_server.url, "enabled": True}],
            }
        ],
        "tokens": [TOKEN],
        "think_seconds": 0.01,
        "pace_seconds": 0.01,
    }
    path = tmp_path / "harness.json"
    path.write_text(json.dumps(config))
    server = ServerProcess(
        "harness_examples.report_harness",
        args=["--config", str(path), "--db", str(tmp_path / "harness.db")],
    )
    with server:
        yield server


def _events(http: httpx.Client, response_id: str) -> list[dict[str, Any]]:
    """The response's events so far (the replayed log; a running response is cut short)."""
    events: list[dict[str, Any]] = []
    try:
        with http.stream("GET", f"/v1/responses/{response_id}?stream=true", timeout=1.0) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
    except httpx.ReadTimeout:
        pass  # still running: what arrived so far is enough
    return events


def _until(check: Any, what: str, deadline_s: float = 30.0) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_harness_answers_a_calls_input_by_op_ref(
    harness: ServerProcess, mrtr_server: ServerProcess
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    base = f"http://127.0.0.1:{harness.port}"
    with httpx.Client(base_url=base, headers=headers, timeout=10) as http:
        created = http.post(
            "/v1/responses",
            json={
                "input": 'call mrtr.approve_payment {"amount": 32} policy=ask',
                "metadata": {"harness_id": "chrn_mrtr"},
                "background": True,
            },
        )
        assert created.status_code == 200, created.text
        response_id = created.json()["id"]

        def asked() -> dict[str, Any] | None:
            return next(
                (
                    e
                    for e in _events(http, response_id)
                    if e["type"] == "bridge.mcp_call.input_required"
                ),
                None,
            )

        question = _until(asked, "bridge.mcp_call.input_required")
        url = f"/v1/responses/{response_id}/mcp_inputs"
        body = {"op_ref": question["op_ref"], "input_ref": question["input_ref"], "response": YES}
        # A bad answer is refused with every problem named, and nothing is recorded or sent.
        for bad, named in (
            ({"action": "accept", "content": {"approve": "yes"}}, "approve:"),
            ({"action": "accept", "content": {"approve": True, "colour": "red"}}, "colour:"),
            ({"action": "approve"}, "action:"),
            ({"action": "decline", "content": {"approve": True}}, "takes no content"),
        ):
            refused = http.post(url, json={**body, "response": bad})
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["code"] == "invalid_input_answer" and error["param"] == "response"
            assert any(named in p for p in error["detail"]["problems"]), error
        types = [e["type"] for e in _events(http, response_id)]
        assert "bridge.mcp_call.input_answered" not in types
        assert "paid 32" not in effects(mrtr_server.effects_path)  # type: ignore[attr-defined]
        answered = http.post(url, json=body)
        assert answered.status_code == 200, answered.text
        assert answered.json()["accepted"] is True
        again = http.post(url, json=body)
        assert again.status_code == 409 and again.json()["error"]["code"] == (
            "input_already_answered"
        )
        missing = http.post(url, json={"op_ref": 7, "input_ref": "in_x"})
        assert missing.status_code == 400

        def finished() -> dict[str, Any] | None:
            final: dict[str, Any] = http.get(f"/v1/responses/{response_id}").json()
            return final if final["status"] != "in_progress" else None

        final = _until(finished, "the response to finish")
        types = [e["type"] for e in _events(http, response_id)]
    assert final["status"] == "completed", final
    assert effects(mrtr_server.effects_path).count("paid 32") == 1  # type: ignore[attr-defined]
    assert types.count("bridge.mcp_call.input_answered") == 1
    assert "bridge.mcp_call.result" in types and "bridge.mcp_task.unknown_outcome" not in types
