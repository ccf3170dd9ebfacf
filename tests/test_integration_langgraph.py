"""LangGraph through the bridge (``bridge.integrations.langgraph``) against the real example
MCP servers: a scripted chat model (no network) drives a model → ToolNode graph whose tools
are bridged and whose checkpoints live in the bridge ledger."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command

from bridge import Bridge, BridgeSettings, LostReason, McpServerConfig, WaitMode, events as ev
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
from tests.support.example_servers import example_servers
from tests.support.langgraph_agent import agent_graph, call, drive, pay
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
TOKEN = "langgraph-secret"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with example_servers(tmp_path_factory.mktemp("payments") / "payments.db", TOKEN) as procs:
        yield procs


def configs(servers: dict[str, ServerProcess]) -> list[McpServerConfig]:
    return [McpServerConfig(name=n, url=s.url, credential_ref="mcp") for n, s in servers.items()]


@pytest.fixture
async def bridge(tmp_path: Path, servers: dict[str, ServerProcess]) -> AsyncIterator[Bridge]:
    async with Bridge.open(
        BridgeSettings(
            ledger_url=tmp_path / "ledger.db",
            principals=[P],
            mcp_servers=configs(servers),
            credentials={"mcp": TOKEN}.get,
            scheduler=FAST,
        )
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
    done = await bridge.run(P, run_ref).operation(
        f"{run_ref}:call-r1"
    )  # operation id = run ref:call id
    assert done is not None and done.task is not None


async def test_detach_parks_with_an_interrupt_and_resumes_when_settled(bridge: Bridge) -> None:
    run_ref = await new_run(bridge)
    tools = await bridge_tools(bridge, P, "reports", wait=WaitMode.DETACH)
    graph = agent_graph(bridge, P, tools, [call("generate_report", "call-r2", **REPORT)])
    config = graph_config(run_ref)
    parked = await graph.ainvoke({"messages": [("user", "report")]}, config)
    [interrupt] = parked["__interrupt__"]
    assert interrupt.value["kind"] == PARKED_TASK and interrupt.value["tool_call_id"] == "call-r2"
    assert (
        await (await bridge.run_of(P, interrupt.value["task_ref"])).task(
            interrupt.value["task_ref"]
        )
    ).is_open
    resume = await when_settled(bridge, P, parked["__interrupt__"], timeout=30)
    state = await graph.ainvoke(resume, config)
    [result] = tool_results(state)
    assert result.status == "success" and "Quarterly report Q3" in result.text
    assert "__interrupt__" not in state


def payment(key: str) -> dict[str, Any]:
    return {"amount": 120, "currency": "EUR", "payee": "ACME Corp", "payment_key": key}


async def payment_count(bridge: Bridge, run_ref: str, key: str) -> int:
    counted = await bridge.run(P, run_ref).call_tool(
        "payments", "payment_count", {"payment_key": key}
    )
    return int(counted.text())


async def test_approval_parks_the_graph_and_a_human_answers_the_typed_request(
    bridge: Bridge,
) -> None:
    run_ref, key = await new_run(bridge), f"pay-{uuid.uuid4().hex[:8]}"
    tools = await bridge_tools(bridge, P, "payments", wait=WaitMode.DETACH)
    graph = agent_graph(bridge, P, tools, [call("approve_payment", "call-pay", **payment(key))])
    config = graph_config(run_ref)
    state = await graph.ainvoke({"messages": [("user", "pay")]}, config)
    asked: list[dict[str, Any]] = []
    for _ in range(6):  # parked task → its question → answered → parked again → settled
        interrupts = state.get("__interrupt__")
        if not interrupts:
            break
        questions = bridge_interrupts(interrupts, ASKED_INPUT)
        if not questions:
            resume = await when_settled(bridge, P, interrupts, timeout=30)
        else:
            [(interrupt_id, question)] = questions.items()
            asked.append(question)
            if len(asked) == 1:  # not a boolean: refused before anything is recorded
                resume = Command(resume=answer(question, "accept", {"approve": "yes"}))
            else:
                resume = Command(
                    resume={interrupt_id: answer(question, "accept", {"approve": True})}
                )
        state = await graph.ainvoke(resume, config)
    assert "__interrupt__" not in state
    first, second = asked
    assert first["input_ref"] == second["input_ref"] and first["note"] is None
    assert second["note"] is not None and "answer not taken" in second["note"]
    assert first["requested_schema"]["required"] == ["approve"]
    assert f"key {key}" in (first["message"] or "")
    [result] = tool_results(state)
    assert (result.status, result.text) == ("success", f"approved {key}")
    assert await payment_count(bridge, run_ref, key) == 1


async def test_wait_mode_approval_needs_a_concurrent_human(bridge: Bridge) -> None:
    run_ref, key = await new_run(bridge), f"pay-{uuid.uuid4().hex[:8]}"
    tools = await bridge_tools(bridge, P, "payments", wait=WaitMode.WAIT)
    graph = agent_graph(bridge, P, tools, [call("approve_payment", "call-pay", **payment(key))])

    async def human() -> None:  # the harness's subscriber: answers while the node is blocked
        async for event in bridge.run(P, run_ref).subscribe():
            if isinstance(event, ev.TaskInputRequired):
                await bridge.run(P, event.run_ref).input_request(event).accept({"approve": True})
                return

    async with anyio.create_task_group() as group:
        group.start_soon(human)
        with anyio.fail_after(60):
            state = await graph.ainvoke({"messages": [("user", "pay")]}, graph_config(run_ref))
    [result] = tool_results(state)
    assert (result.status, result.text) == ("success", f"approved {key}")
    assert await payment_count(bridge, run_ref, key) == 1


async def test_a_lost_task_is_reported_to_the_model_as_lost(
    bridge: Bridge, servers: dict[str, ServerProcess]
) -> None:
    run_ref = await new_run(bridge)
    tools = await bridge_tools(bridge, P, "reports", wait=WaitMode.DETACH)
    slow = {"quarter": "Q4", "sections": 3, "seconds_per_section": 30}
    graph = agent_graph(bridge, P, tools, [call("generate_report", "call-slow", **slow)])
    config = graph_config(run_ref)
    parked = await graph.ainvoke({"messages": [("user", "report")]}, config)
    [interrupt] = parked["__interrupt__"]
    await anyio.to_thread.run_sync(servers["reports"].restart)  # its tasks are in memory
    resume = await when_settled(bridge, P, parked["__interrupt__"], timeout=30)
    task = await (await bridge.run_of(P, interrupt.value["task_ref"])).task(
        interrupt.value["task_ref"]
    )
    assert task.lost_reason is LostReason.NOT_FOUND
    state = await graph.ainvoke(resume, config)
    [result] = tool_results(state)
    assert result.status == "error" and "task lost (not_found)" in result.text
    assert state["messages"][-1].text.startswith("final: [error] task lost (not_found)")


@pytest.mark.e2e
@pytest.mark.parametrize("crash", ["approved", "parked"])
async def test_a_sigkilled_harness_resumes_the_thread_and_pays_once(
    tmp_path: Path, servers: dict[str, ServerProcess], crash: str
) -> None:
    db, key = tmp_path / "crash.db", f"pay-{uuid.uuid4().hex[:8]}"
    died = await anyio.run_process(
        [
            sys.executable,
            *("-m", "tests.support.langgraph_driver", "--db", str(db)),
            *("--payments-url", servers["payments"].url, "--key", key, "--crash", crash),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "LANGGRAPH_DRIVER_TOKEN": TOKEN},
        check=False,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr.decode()[-2000:]
    run_ref = died.stdout.decode().split()[0]
    async with Bridge.open(
        BridgeSettings(
            # the restarted harness: same ledger, same graph
            ledger_url=db,
            principals=[P],
            mcp_servers=configs(servers),
            credentials={"mcp": TOKEN}.get,
            scheduler=FAST,
        )
    ) as bridge:
        mode = WaitMode.WAIT if crash == "approved" else WaitMode.DETACH
        tools = await bridge_tools(bridge, P, "payments", wait=mode)
        graph = agent_graph(bridge, P, tools, pay(key))
        config = graph_config(run_ref)
        saved = await graph.aget_state(config)  # from the checkpoints in the ledger
        assert saved.next == ("tools",)
        [tool_call] = saved.values["messages"][-1].tool_calls
        assert tool_call["id"] == "call-pay"
        if crash == "parked":
            [parked] = saved.interrupts
            assert parked.value["kind"] == PARKED_TASK
            state = await drive(bridge, P, graph, config, saved.interrupts)
        else:
            with anyio.fail_after(60):
                state = await graph.ainvoke(None, config, durability="sync")
        [result] = tool_results(state)
        assert (result.status, result.text) == ("success", f"approved {key}")
        assert await payment_count(bridge, run_ref, key) == 1
        [task] = await bridge.run(P, run_ref).tasks()  # one task: never called twice
        assert task.result is not None
        assert await bridge.run(P, run_ref).agent_state(f"langgraph:{run_ref}") is not None


async def test_the_checkpointer_keeps_a_threads_newest_checkpoints_beside_the_run(
    db_url: str, servers: dict[str, ServerProcess]
) -> None:
    async with Bridge.open(
        BridgeSettings(
            # SQLite and PostgreSQL: the agent state is a ledger row
            ledger_url=db_url,
            principals=[P],
            mcp_servers=configs(servers),
            credentials={"mcp": TOKEN}.get,
            scheduler=FAST,
        )
    ) as bridge:
        await keeps_newest_checkpoints(bridge)


async def keeps_newest_checkpoints(bridge: Bridge) -> None:
    run_ref = await new_run(bridge)
    tools = await bridge_tools(bridge, P, "reports", wait=WaitMode.WAIT)
    quick = {"sections": 1, "seconds_per_section": 0}
    script = [call("generate_report", f"call-{q}", quarter=q, **quick) for q in ("Q1", "Q2")]
    graph = agent_graph(bridge, P, tools, script, keep=3)
    config = graph_config(run_ref)
    await graph.ainvoke({"messages": [("user", "two reports")]}, config)
    history = [snapshot async for snapshot in graph.aget_state_history(config)]
    assert len(history) == 3  # the newest three: enough to resume, bounded
    assert history[0].next == () and history[0].values["messages"][-1].text.startswith("final:")
    assert [h.config["configurable"]["checkpoint_id"] for h in history] == sorted(
        (h.config["configurable"]["checkpoint_id"] for h in history), reverse=True
    )
    saved = await bridge.run(P, run_ref).agent_state(f"langgraph:{run_ref}")
    assert saved is not None and list(saved.state["namespaces"]) == [""]
    other = await graph.aget_state(graph_config(run_ref, thread_id="another-thread"))
    assert other.values == {}  # threads of one run are separate states


def test_importing_bridge_integrations_loads_no_framework() -> None:
    probe = (
        "import sys, bridge, bridge.integrations; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'langgraph', 'langchain_core'}))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    shown = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert shown.stdout.strip() == "[]", shown.stderr


async def test_parallel_detached_calls_park_one_at_a_time_and_each_runs_once(
    bridge: Bridge,
) -> None:
    run_ref = await new_run(bridge)
    tools = await bridge_tools(bridge, P, "reports", wait=WaitMode.DETACH)
    both = [call("generate_report", f"call-{q}", **{**REPORT, "quarter": q}) for q in ("Q1", "Q2")]
    graph = agent_graph(bridge, P, tools, both[:1])
    model_turn = AIMessage("", tool_calls=both)  # one model turn asking for two tools at once
    config = graph_config(run_ref)
    await graph.aupdate_state(config, {"messages": [("user", "two"), model_turn]}, "agent")
    state = await graph.ainvoke(None, config)
    rounds = 0
    while interrupts := state.get("__interrupt__"):  # LangGraph stops the node at the first
        rounds += 1
        assert rounds <= 4, "parked calls did not converge"
        state = await graph.ainvoke(await when_settled(bridge, P, interrupts, timeout=30), config)
    firsts = sorted(m.text.splitlines()[0] for m in tool_results(state))
    assert firsts == ["Quarterly report Q1", "Quarterly report Q2"]
    assert len(await bridge.run(P, run_ref).tasks()) == 2  # each call sent once
