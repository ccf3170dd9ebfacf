"""Acceptance of the example harness: a third-party UHP client drives it end to end, and a
SIGKILL of the harness during nested tasks loses nothing and repeats no payment."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.processes import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]  # harness + MCP servers as processes
TOKEN = "acceptance-token"
PAYMENTS_TOKEN = "acceptance-payments-token"
HARNESS_ID = "chrn_reports"


@pytest.fixture(scope="module")
def mcp_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("mcp")
    reports = ServerProcess("harness_examples.mcp_servers.report_server")
    payments = ServerProcess(
        "harness_examples.mcp_servers.payments_server",
        args=["--token", PAYMENTS_TOKEN, "--ledger", str(folder / "payments.db")],
    )
    with reports, payments:
        yield {"reports": reports, "payments": payments}


def _write_config(folder: Path, servers: dict[str, Any]) -> Path:
    config = {
        "harnesses": [
            {
                "id": HARNESS_ID,
                "base": "scripted",
                "model": "scripted-1",
                "mcpServers": [
                    {"name": "reports", "url": servers["reports"].url, "enabled": True},
                    {
                        "name": "payments",
                        "url": servers["payments"].url,
                        "enabled": True,
                        "auth": {"credential_ref": "payments-token"},
                    },
                ],
            }
        ],
        "tokens": [TOKEN],
        "credentials": {"payments-token": PAYMENTS_TOKEN},
    }
    path = folder / "harness.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def harness(tmp_path: Path, mcp_servers: dict[str, Any]) -> Iterator[ServerProcess]:
    config = _write_config(tmp_path, mcp_servers)
    server = ServerProcess(
        "harness_examples.report_harness",
        args=["--config", str(config), "--db", str(tmp_path / "harness.db")],
    )
    with server:
        yield server


def _base(server: ServerProcess) -> str:
    return f"http://127.0.0.1:{server.port}"


def test_harnessrouter_drives_the_harness_end_to_end(harness: ServerProcess) -> None:
    import harnessrouter

    router = harnessrouter.connect(_base(harness), TOKEN)
    first = router.run("reply with the word banana", harness_id=HARNESS_ID)
    assert first["status"] == "completed"
    streamed = router.collect("reply with the word mango", harness_id=HARNESS_ID)
    assert streamed.text.strip() == "mango" and streamed.response["status"] == "completed"
    again = router.continue_(first["id"], "repeat your last answer", harness_id=HARNESS_ID)
    assert again["status"] == "completed"
    assert again["metadata"]["session_id"] == first["metadata"]["session_id"]
    running = router.run("count slowly to 200", harness_id=HARNESS_ID, background=True)
    router.cancel(running["id"])
    final = router.wait(running["id"], interval=0.1, timeout=30)
    assert final["status"] == "cancelled"


async def _get(base: str, response_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        answer = await http.get(
            f"{base}/v1/responses/{response_id}", headers={"Authorization": f"Bearer {TOKEN}"}
        )
    answer.raise_for_status()
    body: dict[str, Any] = answer.json()
    return body


async def _events(base: str, response_id: str) -> list[dict[str, Any]]:
    """The response's persisted event log, read back as a stream (Last-Event-ID unset)."""
    events: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=5) as http:
        try:
            async with http.stream(
                "GET",
                f"{base}/v1/responses/{response_id}?stream=true",
                headers={"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"},
            ) as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
        except httpx.ReadTimeout:
            pass  # still running: what arrived so far is enough
    return events


async def _payment_count(url: str, key: str) -> int:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {PAYMENTS_TOKEN}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        result = await client.call_tool("payment_count", {"payment_key": key})
    structured = result.structured_content or {}
    return int(structured.get("result", 0))


async def test_sigkill_of_the_harness_during_nested_tasks_loses_nothing(
    harness: ServerProcess, mcp_servers: dict[str, Any]
) -> None:
    base = _base(harness)
    key = "sigkill-pay-1"
    arguments = {"amount": 42, "currency": "EUR", "payee": "ACME", "payment_key": key}
    task_input = "\n".join(
        [
            'call reports.generate_report {"quarter": "Q2", "sections": 2} policy=wait',
            f"call payments.approve_payment {json.dumps(arguments)} policy=ask",
        ]
    )
    async with httpx.AsyncClient() as http:
        created = await http.post(
            f"{base}/v1/responses",
            json={"input": task_input, "metadata": {"harness_id": HARNESS_ID}, "background": True},
            headers={"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": "sigkill-1"},
        )
    created.raise_for_status()
    response_id = created.json()["id"]

    async def report_task_started() -> bool:
        types = [e["type"] for e in await _events(base, response_id)]
        return "bridge.mcp_task.created" in types

    with anyio.fail_after(30):
        while not await report_task_started():
            await anyio.sleep(0.1)
    harness.restart()  # SIGKILL mid-task, then a new process on the same database

    async def asked() -> dict[str, Any] | None:
        for event in await _events(base, response_id):
            if event["type"] == "bridge.mcp_task.input_required":
                return event
        return None

    with anyio.fail_after(60):
        question = await asked()
        while question is None:
            await anyio.sleep(0.2)
            question = await asked()

    async def answer(input_ref: str) -> httpx.Response:
        async with httpx.AsyncClient() as http:
            return await http.post(
                f"{base}/v1/responses/{response_id}/mcp_inputs",
                json={
                    "task_ref": question["task_ref"],
                    "input_ref": input_ref,
                    "response": {"action": "accept", "content": {"approve": True}},
                },
                headers={"Authorization": f"Bearer {TOKEN}"},
            )

    unknown = await answer("in_not_asked")
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["error"]["code"] == "input_request_not_found"
    answered = await answer(question["input_ref"])
    assert answered.status_code < 300, answered.text
    again = await answer(question["input_ref"])  # one answer per request: the second is refused
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "input_already_answered"
    with anyio.fail_after(60):
        final = await _get(base, response_id)
        while final["status"] == "in_progress":
            await anyio.sleep(0.2)
            final = await _get(base, response_id)
    assert final["status"] == "completed", final
    summary = final["metadata"]["bridge_mcp_tasks"]
    assert {t["tool"]: t["status"] for t in summary["tasks"]} == {
        "generate_report": "completed",
        "approve_payment": "completed",
    }
    assert await _payment_count(mcp_servers["payments"].url, key) == 1  # no duplicate payment
