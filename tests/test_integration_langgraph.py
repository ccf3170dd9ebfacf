"""LangGraph through the bridge (``bridge.integrations.langgraph``) against the real example
MCP servers: a scripted chat model (no network) drives a model → ToolNode graph whose tools
are bridged and whose checkpoints live in the bridge ledger."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from bridge import Bridge, McpServerConfig, WaitMode
from bridge.integrations.langgraph import (
    ASKED_INPUT,
    PARKED_TASK,
    answer,
    bridge_interrupts,
    bridge_tools,
    graph_config,
    when_settled,
)
from tests.support.bridging import FAST
from tests.support.langgraph_agent import agent_graph, call
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
TOKEN = "langgraph-secret"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    payments_db = tmp_path_factory.mktemp("payments") / "payments.db"
    procs = {
        "reports": ServerProcess(
            "harness_examples.mcp_servers.report_server", args=["--token", TOKEN]
        ),
        "payments": ServerProcess(
            "harness_examples.mcp_servers.payments_server",
            args=["--ledger", str(payments_db), "--token", TOKEN],
        ),
    }
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for started in [pool.submit(p.start) for p in procs.values()]:
                started.result()
        yield procs
    finally:
        for proc in procs.values():
            proc.stop()
    for proc in procs.values():
        proc.remove_logs()


def configs(servers: dict[str, ServerProcess]) -> list[McpServerConfig]:
    return [McpServerConfig(name=n, url=s.url, credential_ref="mcp") for n, s in servers.items()]


@pytest.fixture
async def bridge(tmp_path: Path, servers: dict[str, ServerProcess]) -> AsyncIterator[Bridge]:
    async with Bridge.open(
        tmp_path / "ledger.db",
        principals=[P],
        mcp_servers=configs(servers),
        credentials={"mcp": TOKEN}.get,
        scheduler=FAST,
    ) as opened:
        yield opened


async def new_run(bridge: Bridge) -> str:
    name = uuid.uuid4().hex[:8]
    run = await bridge.register_served_run(
        P, response_id=f"resp_{name}", session_id=f"hsess{name}", harness_id="chrn_langgraph"
    )
    return run.ref


def tool_results(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


REPORT = {"quarter": "Q3", "sections": 2, "seconds_per_section": 0.3}


async def test_wait_blocks_the_tool_node_until_the_long_task_ends(bridge: Bridge) -> None:
    run_ref = await new_run(bridge)
    tools = await bridge_tools(bridge, P, "reports", wait=WaitMode.WAIT)
    graph = agent_graph(bridge, P, tools, [call("generate_report", "call-r1", **REPORT)])
    state = await graph.ainvoke({"messages": [("user", "report")]}, graph_config(run_ref))
    [result] = tool_results(state)
    assert result.status == "success" and "Quarterly report Q3" in result.text
    assert state["messages"][-1].text.startswith("final: [success] Quarterly report Q3")
    done = await bridge.operation(P, f"{run_ref}:call-r1")  # operation id = run ref:call id
    assert done is not None and done.task is not None


async def test_detach_parks_with_an_interrupt_and_resumes_when_settled(bridge: Bridge) -> None:
    run_ref = await new_run(bridge)
    tools = await bridge_tools(bridge, P, "reports", wait=WaitMode.DETACH)
    graph = agent_graph(bridge, P, tools, [call("generate_report", "call-r2", **REPORT)])
    config = graph_config(run_ref)
    parked = await graph.ainvoke({"messages": [("user", "report")]}, config)
    [interrupt] = parked["__interrupt__"]
    assert interrupt.value["kind"] == PARKED_TASK and interrupt.value["tool_call_id"] == "call-r2"
    assert (await bridge.get_task(P, interrupt.value["task_ref"])).is_open
    resume = await when_settled(bridge, P, parked["__interrupt__"], timeout=30)
    state = await graph.ainvoke(resume, config)
    [result] = tool_results(state)
    assert result.status == "success" and "Quarterly report Q3" in result.text
    assert "__interrupt__" not in state
