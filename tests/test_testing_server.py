"""``bridge.testing.server`` (the package's example task server) as a real process, read by the
official SDK client: what a tool's result carries matches what its listing advertises."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import jsonschema
import pytest
from mcp import Client

from bridge._mcp.wire.extension import TasksClientExtension
from tests.support.mcp_client import get_task, start_task
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def report_server() -> Iterator[ServerProcess]:
    with ServerProcess("bridge.testing.server") as server:
        yield server


async def test_generate_report_returns_structured_content_matching_its_output_schema(
    report_server: ServerProcess,
) -> None:
    """A client that checks results against ``outputSchema`` (the TypeScript SDK does) accepts
    the completed task's result: ``structuredContent`` is there and valid, the text beside it."""
    async with Client(report_server.url, extensions=[TasksClientExtension()]) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        schema = tools["generate_report"].output_schema
        assert schema is not None
        args = {"quarter": "Q3", "sections": 1, "seconds_per_section": 0.05}
        created = await start_task(client, "generate_report", args)
        assert created.task_id is not None
        with anyio.fail_after(10):
            while (state := await get_task(client, created.task_id)).status == "working":
                await anyio.sleep(0.05)
        echoed = await client.call_tool("echo", {"text": "hi"})
    assert state.status == "completed" and state.result is not None
    structured = state.result.get("structuredContent")
    assert structured is not None, "outputSchema advertised, no structuredContent returned"
    jsonschema.validate(structured, schema)
    assert structured["result"] == state.result["content"][0]["text"]
    # The inline tool keeps doing what the SDK does for it: the same shape.
    assert echoed.structured_content == {"result": "hi"}
    jsonschema.validate(echoed.structured_content, tools["echo"].output_schema or {})
