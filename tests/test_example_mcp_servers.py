"""The example MCP servers in ``harness_examples.mcp_servers``, driven by the official SDK client.

Both servers run as real subprocesses (started in parallel: each takes a few seconds to import
FastMCP). The report server is protected with ``--token``, the payments server with
``$PAYMENTS_SERVER_TOKEN``, so every SDK call here also proves that the bearer header passes.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client, MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from bridge._mcp.wire.shapes import TASKS_EXTENSION, CreateTaskResult, DetailedTask
from harness_examples.mcp_servers.auth import bearer_middleware, resolve_token
from tests.support.mcp_client import connect, get_task, start_task, update_task
from tests.support.processes import ServerProcess

REPORT_MODULE = "harness_examples.mcp_servers.report_server"
PAYMENTS_MODULE = "harness_examples.mcp_servers.payments_server"
REPORT_TOKEN = "report-secret"
PAYMENTS_TOKEN = "payments-secret"
DEADLINE_SECONDS = 10
POLL_SECONDS = 0.05


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def poll_until(
    client: Client, task_id: str, statuses: set[str], seen: list[DetailedTask] | None = None
) -> DetailedTask:
    """Poll ``tasks/get`` until the task reaches one of ``statuses`` (deadline-bounded)."""
    with anyio.fail_after(DEADLINE_SECONDS):
        while True:
            state = await get_task(client, task_id)
            if seen is not None:
                seen.append(state)
            if state.status in statuses:
                return state
            assert state.status == "working", state
            await anyio.sleep(POLL_SECONDS)


def result_text(state: DetailedTask) -> str:
    assert state.status == "completed", state
    assert state.result is not None
    assert state.result["isError"] is False, state.result
    text = state.result["content"][0]["text"]
    assert isinstance(text, str)
    return text


async def call_inline(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    result = await client.session.call_tool(tool, arguments, allow_claimed=True)
    assert isinstance(result, mcp_types.CallToolResult), result
    assert not result.is_error, result
    assert result.structured_content is not None
    return result.structured_content["result"]


# --- servers ------------------------------------------------------------------------------------


@dataclass
class Servers:
    report: ServerProcess
    payments: ServerProcess
    ledger: Path


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    ledger = tmp_path_factory.mktemp("payments") / "ledger.db"
    report = ServerProcess(REPORT_MODULE, args=["--token", REPORT_TOKEN])
    payments = ServerProcess(
        PAYMENTS_MODULE,
        args=["--ledger", str(ledger)],
        env={"PAYMENTS_SERVER_TOKEN": PAYMENTS_TOKEN},
    )
    procs = (report, payments)
    try:
        with ThreadPoolExecutor(max_workers=len(procs)) as pool:
            for started in [pool.submit(proc.start) for proc in procs]:
                started.result()
        yield Servers(report=report, payments=payments, ledger=ledger)
    finally:
        for proc in procs:
            proc.stop()
    for proc in procs:
        proc.remove_logs()


# --- report server ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_generate_report_is_a_task_with_progress(servers: Servers) -> None:
    args = {"quarter": "2026-Q3", "sections": 2, "seconds_per_section": 0.4}
    seen: list[DetailedTask] = []
    async with connect(servers.report.url, REPORT_TOKEN) as client:
        created = await start_task(client, "generate_report", args)
        assert created.status == "working"
        assert created.poll_interval_ms == 200
        final = await poll_until(client, created.task_id, {"completed", "failed"}, seen)
    assert result_text(final).splitlines() == [
        "Quarterly report 2026-Q3",
        "Sections: 2",
        "1. Revenue: revenue figures for 2026-Q3 are on plan.",
        "2. Costs: costs figures for 2026-Q3 are on plan.",
        "End of report 2026-Q3.",
    ]
    messages = {s.status_message for s in seen if s.status == "working" and s.status_message}
    assert messages, "a 0.8 s task polled every 50 ms showed no status message"
    assert messages <= {"writing section 1/2: Revenue", "writing section 2/2: Costs"}


@pytest.mark.anyio
async def test_report_tool_annotations_and_required_task(servers: Servers) -> None:
    async with connect(servers.report.url, REPORT_TOKEN) as client:
        assert TASKS_EXTENSION in (client.server_capabilities.extensions or {})
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    annotations = tools["generate_report"].annotations
    assert annotations is not None
    assert annotations.read_only_hint is True
    assert annotations.idempotent_hint is True

    # A client that does not declare the tasks extension cannot run a task-only tool.
    async with connect(servers.report.url, REPORT_TOKEN, tasks=False) as plain:
        with pytest.raises(MCPError) as caught:
            await plain.session.call_tool("generate_report", {"quarter": "Q1"})
    assert caught.value.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY


# --- payments server ----------------------------------------------------------------------------


async def pay_until_input_required(
    client: Client, payment_key: str
) -> tuple[CreateTaskResult, DetailedTask]:
    args = {"amount": 120, "currency": "EUR", "payee": "ACME Corp", "payment_key": payment_key}
    created = await start_task(client, "approve_payment", args)
    state = await poll_until(client, created.task_id, {"input_required", "completed", "failed"})
    assert state.status == "input_required", state
    return created, state


def ledger_rows(ledger: Path, payment_key: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(ledger)) as db:
        return db.execute(
            "SELECT payment_key, amount, currency, payee FROM payments WHERE payment_key = ?",
            (payment_key,),
        ).fetchall()


@pytest.mark.anyio
async def test_approve_payment_asks_then_records_once(servers: Servers) -> None:
    key = f"pay-{uuid.uuid4().hex[:8]}"
    async with connect(servers.payments.url, PAYMENTS_TOKEN) as client:
        created, parked = await pay_until_input_required(client, key)
        assert parked.input_requests is not None
        [(wire_key, request)] = parked.input_requests.items()
        assert wire_key.startswith(f"{created.task_id}:")  # minted by fastmcp-tasks
        assert request == {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": f"Approve payment of 120 EUR to ACME Corp (key {key})?",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "approve": {
                            "type": "boolean",
                            "title": "Approve",
                            "description": "true to execute the payment, false to decline it",
                        }
                    },
                    "required": ["approve"],
                },
            },
        }
        assert await call_inline(client, "payment_count", {"payment_key": key}) == 0

        answer = {"action": "accept", "content": {"approve": True}}
        await update_task(client, created.task_id, {wire_key: answer})
        final = await poll_until(client, created.task_id, {"completed", "failed"})
        assert result_text(final) == f"approved {key}"
        assert await call_inline(client, "payment_count", {"payment_key": key}) == 1
    assert ledger_rows(servers.ledger, key) == [(key, 120, "EUR", "ACME Corp")]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "answer",
    [
        {"action": "accept", "content": {"approve": False}},
        {"action": "decline"},
    ],
)
async def test_declined_payment_records_nothing(servers: Servers, answer: dict[str, Any]) -> None:
    key = f"pay-{uuid.uuid4().hex[:8]}"
    async with connect(servers.payments.url, PAYMENTS_TOKEN) as client:
        created, parked = await pay_until_input_required(client, key)
        assert parked.input_requests is not None
        [wire_key] = parked.input_requests
        await update_task(client, created.task_id, {wire_key: answer})
        final = await poll_until(client, created.task_id, {"completed", "failed"})
        assert result_text(final) == f"declined {key}"
        assert await call_inline(client, "payment_count", {"payment_key": key}) == 0


@pytest.mark.anyio
@pytest.mark.e2e
async def test_payments_ledger_survives_restart(servers: Servers) -> None:
    key = f"pay-{uuid.uuid4().hex[:8]}"
    async with connect(servers.payments.url, PAYMENTS_TOKEN) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        created, parked = await pay_until_input_required(client, key)
        assert parked.input_requests is not None
        [wire_key] = parked.input_requests
        answer = {"action": "accept", "content": {"approve": True}}
        await update_task(client, created.task_id, {wire_key: answer})
        await poll_until(client, created.task_id, {"completed"})
    pay, count = tools["approve_payment"].annotations, tools["payment_count"].annotations
    assert pay is not None and count is not None
    assert (pay.destructive_hint, pay.idempotent_hint) == (True, False)
    assert count.read_only_hint is True

    servers.payments.restart()
    async with connect(servers.payments.url, PAYMENTS_TOKEN) as client:
        assert await call_inline(client, "payment_count", {"payment_key": key}) == 1
        with pytest.raises(MCPError) as caught:  # tasks are in memory: gone with the process
            await get_task(client, created.task_id)
    assert caught.value.code == mcp_types.INVALID_PARAMS


# --- bearer token -------------------------------------------------------------------------------

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "plain-httpx", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("which", ["report", "payments"])
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic cmVwb3J0LXNlY3JldA=="])
def test_requests_without_the_token_get_401(
    servers: Servers, which: str, authorization: str | None
) -> None:
    url = servers.report.url if which == "report" else servers.payments.url
    headers = dict(MCP_HEADERS)
    if authorization is not None:
        headers["Authorization"] = authorization
    with httpx.Client(timeout=5) as http:
        response = http.post(url, json=INITIALIZE, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer ")


def test_request_with_the_token_passes(servers: Servers) -> None:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {REPORT_TOKEN}"}
    with httpx.Client(timeout=5) as http:
        response = http.post(servers.report.url, json=INITIALIZE, headers=headers)
    assert response.status_code == 200, response.text


# --- the middleware and token resolution, in process --------------------------------------------


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("authorization", "status"),
    [("Bearer t0k", 200), ("bearer t0k", 200), ("Bearer t0k2", 401), ("t0k", 401), (None, 401)],
)
async def test_bearer_middleware(authorization: str | None, status: int) -> None:
    app = Starlette(routes=[Route("/", _ok)], middleware=bearer_middleware("t0k"))
    headers = {"Authorization": authorization} if authorization is not None else {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        assert (await http.get("/", headers=headers)).status_code == status


def test_no_token_means_no_middleware(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("X_TOKEN", raising=False)
    assert resolve_token(None, "X_TOKEN") is None
    assert bearer_middleware(None) == []
    monkeypatch.setenv("X_TOKEN", "")
    assert resolve_token(None, "X_TOKEN") is None
    monkeypatch.setenv("X_TOKEN", "from-env")
    assert resolve_token(None, "X_TOKEN") == "from-env"
    assert resolve_token("from-cli", "X_TOKEN") == "from-cli"
