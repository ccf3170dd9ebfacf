"""Smoke tests for the test servers the bridge's end-to-end tests rely on.

If these fail, the fault is in the test servers or ``ServerProcess``, not in the bridge. The
Tasks server runs as a subprocess (``ServerProcess`` is under test too); the adversarial fake's
wire behaviour is checked over the SDK's in-memory transport (no port: the subject is what it
answers, and its HTTP path is exercised by ``test_mcp_adversarial.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from bridge._mcp.wire.extension import TasksClientExtension
from bridge._mcp.wire.shapes import CreateTaskResult
from tests.servers import adversarial_server
from tests.support.mcp_client import get_task, start_task
from tests.support.processes import ServerProcess


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def create(client: Client, tool: str, arguments: dict[str, Any]) -> CreateTaskResult:
    result = await start_task(client, tool, arguments)
    assert result.task_id
    return result


@pytest.fixture(scope="module")
def tasks_server() -> Iterator[ServerProcess]:
    with ServerProcess("tests.servers.tasks_server") as server:
        yield server


@pytest.mark.anyio
async def test_slow_report_task_completes(tasks_server: ServerProcess) -> None:
    async with Client(tasks_server.url, extensions=[TasksClientExtension()]) as client:
        created = await create(client, "slow_report", {"quarter": "Q3", "seconds": 0.2})
        assert created.status == "working"
        assert created.task_id is not None
        with anyio.fail_after(10):
            while (state := await get_task(client, created.task_id)).status == "working":
                await anyio.sleep(0.05)
    assert state.status == "completed"
    assert state.result is not None
    assert state.result["content"][0]["text"] == "report Q3"
    assert state.result["isError"] is False


@pytest.mark.anyio
async def test_echo_answers_inline(tasks_server: ServerProcess) -> None:
    async with Client(tasks_server.url, extensions=[TasksClientExtension()]) as client:
        result = await client.session.call_tool("echo", {"text": "hi"}, allow_claimed=True)
    assert isinstance(result, mcp_types.CallToolResult)
    assert isinstance(result.content[0], mcp_types.TextContent)
    assert result.content[0].text == "hi"


@pytest.mark.anyio
async def test_adversarial_regress_goes_back_to_working() -> None:
    async with Client(adversarial_server.mcp, extensions=[TasksClientExtension()]) as client:
        created = await create(client, "regress", {})
        assert created.task_id is not None
        statuses = [(await get_task(client, created.task_id)).status for _ in range(3)]
    assert statuses == ["completed", "working", "working"]


@pytest.mark.anyio
async def test_adversarial_stats_counts_gets() -> None:
    async def stats(client: Client) -> dict[str, dict[str, int]]:
        result = await client.session.call_tool("stats", {}, allow_claimed=True)
        assert isinstance(result, mcp_types.CallToolResult)
        assert isinstance(result.content[0], mcp_types.TextContent)
        parsed: dict[str, dict[str, int]] = json.loads(result.content[0].text)
        return parsed

    async with Client(adversarial_server.mcp, extensions=[TasksClientExtension()]) as client:
        before = await stats(client)
        created = await create(client, "poll_zero", {})
        assert created.poll_interval_ms == 0
        assert created.task_id is not None
        for _ in range(4):
            assert (await get_task(client, created.task_id)).status == "working"
        after = await stats(client)
    assert after["gets"]["poll_zero"] - before["gets"].get("poll_zero", 0) == 4
    assert after["calls"]["poll_zero"] - before["calls"].get("poll_zero", 0) == 1
