"""pydantic-ai agents (deterministic ``FunctionModel``, no network) calling the example MCP
servers (harness_examples/mcp_servers, bearer-protected, real HTTP) through
``bridge.integrations.pydantic_ai``: a long task waited for and detached, an approval answered
by a simulated human in both modes, a SIGKILLed harness restarted to finish with exactly one
payment, and a lost task reported to the model as lost."""

from __future__ import annotations

import json
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
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from bridge import (
    Bridge,
    BridgeSettings,
    InputRequest,
    LostReason,
    McpServerConfig,
    TaskStatus,
    events as ev,
)
from bridge.integrations.pydantic_ai import STATE_NAME, BridgedRun, BridgedToolset
from tests.support.bridging import FAST, served_run, wait_until
from tests.support.example_servers import example_servers
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
TOKEN = "pydantic-ai-secret"
REPORT = {"quarter": "2026-Q3", "sections": 2, "seconds_per_section": 0.3}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    payments_db = tmp_path_factory.mktemp("pydantic-ai-servers") / "payments.db"
    with example_servers(payments_db, TOKEN) as procs:
        yield procs


@pytest.fixture
async def bridge(tmp_path: Path, servers: dict[str, ServerProcess]) -> AsyncIterator[Bridge]:
    configs = [McpServerConfig(name=n, url=s.url, credential_ref="t") for n, s in servers.items()]
    async with Bridge.open(
        BridgeSettings(
            ledger_url=tmp_path / "ledger.db",
            principals=[P],
            mcp_servers=configs,
            credentials={"t": TOKEN}.get,
            scheduler=FAST,
        )
    ) as opened:
        yield opened


async def _run_ref(bridge: Bridge) -> str:
    return await served_run(bridge, P)


class Script:
    """A FunctionModel that calls one tool, then answers with what the tool returned."""

    def __init__(self, tool: str, args: dict[str, Any]) -> None:
        self.tool, self.args = tool, args
        self.returns: list[ToolReturnPart] = []
        self.tool_names: list[str] = []

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tool_names = [t.name for t in info.function_tools]
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            self.returns.extend(returns)
            return ModelResponse(parts=[TextPart(f"saw: {returns[0].model_response_str()}")])
        return ModelResponse(parts=[ToolCallPart(self.tool, self.args)])

    def agent(self, toolset: BridgedToolset) -> Agent[None, Any]:
        return Agent(
            FunctionModel(self.respond),
            output_type=[str, DeferredToolRequests],
            toolsets=[toolset],
        )


def _payment(key: str) -> dict[str, Any]:
    return {"amount": 120, "currency": "EUR", "payee": "ACME", "payment_key": key}


async def _payment_count(bridge: Bridge, key: str) -> int:
    run_ref = await _run_ref(bridge)
    step = await bridge.run(P, run_ref).call_tool("payments", "payment_count", {"payment_key": key})
    return int(step.text())


async def test_wait_blocks_the_tool_call_until_the_long_task_settles(bridge: Bridge) -> None:
    run_ref = await _run_ref(bridge)
    script = Script("generate_report", REPORT)
    toolset = BridgedToolset(bridge, P, "reports", run=run_ref, mode="wait")
    result = await script.agent(toolset).run("write the Q3 report")
    assert script.tool_names == ["generate_report"]  # listed through the bridge's connection
    assert result.output.startswith("saw: Quarterly report 2026-Q3")
    [returned] = script.returns
    assert returned.outcome == "success"
    done = await bridge.run(P, run_ref).operation(f"{run_ref}:{returned.tool_call_id}")
    assert done is not None and done.task is not None
    assert done.task.status is TaskStatus.COMPLETED
    saved = await bridge.run(P, run_ref).agent_state(STATE_NAME)
    assert saved is not None
    assert saved.state["calls"][returned.tool_call_id]["task_ref"] == done.task.ref


async def test_detach_defers_the_call_and_resumes_with_its_result(bridge: Bridge) -> None:
    run_ref = await _run_ref(bridge)
    script = Script("generate_report", REPORT)
    toolset = BridgedToolset(bridge, P, "reports", run=run_ref, mode="detach")
    agent = script.agent(toolset)
    first = await agent.run("write the Q3 report")
    assert isinstance(first.output, DeferredToolRequests)
    [call] = first.output.calls
    parked = first.output.metadata[call.tool_call_id]["bridge"]
    assert parked["operation_id"] == f"{run_ref}:{call.tool_call_id}"
    task = await (await bridge.run_of(P, parked["task_ref"])).task(parked["task_ref"])
    assert task.is_open  # the turn ended while the task kept running
    results = await BridgedRun(agent, toolset).settle(first.output)
    final = await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
    assert final.output.startswith("saw: Quarterly report 2026-Q3")
    created = [e for e in await _events(bridge, run_ref) if isinstance(e, ev.TaskCreated)]
    assert len(created) == 1  # settling replayed the operation: nothing was sent twice


async def _events(bridge: Bridge, run_ref: str) -> list[ev.BridgeEvent]:
    seen: list[ev.BridgeEvent] = []
    with anyio.move_on_after(0.5):
        async for event in bridge.run(P, run_ref).subscribe():
            seen.append(event)
    return seen


@pytest.mark.parametrize("mode", ["wait", "detach"])
async def test_an_approval_is_answered_by_a_human_through_the_input_request(
    bridge: Bridge, mode: str
) -> None:
    run_ref = await _run_ref(bridge)
    key = f"pay-{uuid.uuid4().hex[:8]}"
    script = Script("approve_payment", _payment(key))
    toolset = BridgedToolset(bridge, P, "payments", run=run_ref, mode=mode)  # type: ignore[arg-type]
    asked: list[InputRequest] = []

    async def human(request: InputRequest) -> None:  # a person looking at the question
        asked.append(request)
        await request.accept({"approve": True})

    async def concurrent_human() -> None:  # wait mode: the turn is blocked, someone else answers
        async for event in bridge.run(P, run_ref).subscribe():
            if isinstance(event, ev.TaskInputRequired):
                await human(bridge.run(P, event.run_ref).input_request(event))
                return

    async with anyio.create_task_group() as people:
        if mode == "wait":
            people.start_soon(concurrent_human)
            result = await BridgedRun(script.agent(toolset), toolset).run("pay ACME")
        else:
            result = await BridgedRun(script.agent(toolset), toolset, on_input=human).run("pay")
    [request] = asked
    assert request.message is not None and key in request.message
    assert result.output == f"saw: approved {key}"
    assert await _payment_count(bridge, key) == 1


async def test_a_lost_task_is_reported_to_the_model_as_lost(
    bridge: Bridge, servers: dict[str, ServerProcess]
) -> None:
    run_ref = await _run_ref(bridge)
    script = Script("generate_report", {**REPORT, "sections": 3, "seconds_per_section": 5})
    toolset = BridgedToolset(bridge, P, "reports", run=run_ref, mode="detach")
    agent = script.agent(toolset)
    first = await agent.run("write the Q3 report")
    assert isinstance(first.output, DeferredToolRequests)
    await anyio.to_thread.run_sync(servers["reports"].restart)  # its tasks are in memory
    results = await BridgedRun(agent, toolset).settle(first.output)
    final = await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
    [returned] = script.returns
    assert returned.outcome == "failed"  # not a result: the model is told the task is gone
    assert "task lost (not_found)" in returned.model_response_str()
    assert "outcome is unknown" in final.output
    parked = first.output.metadata[returned.tool_call_id]["bridge"]
    lost = await (await bridge.run_of(P, parked["task_ref"])).task(parked["task_ref"])
    assert lost.lost_reason is LostReason.NOT_FOUND


def _driver(db: Path, url: str, run_ref: str, mode: str, key: str, *approve: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.support.pydantic_ai_driver",
        *("--db", str(db), "--url", url, "--token", TOKEN, "--run-ref", run_ref),
        *("--mode", mode, "--payment-key", key, *approve),
    ]


@pytest.mark.parametrize("mode", ["wait", "detach"])
async def test_a_sigkilled_harness_resumes_the_agent_run_and_pays_once(
    bridge: Bridge, servers: dict[str, ServerProcess], tmp_path: Path, mode: str
) -> None:
    db = tmp_path / "harness.db"
    async with Bridge.open(BridgeSettings(ledger_url=db, principals=[P])) as harness_ledger:
        run_ref = await _run_ref(harness_ledger)
    key = f"pay-{uuid.uuid4().hex[:8]}"
    url = servers["payments"].url
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "first.out"
    with out.open("w") as stdout:
        first = subprocess.Popen(
            _driver(db, url, run_ref, mode, key), cwd=REPO_ROOT, env=env, stdout=stdout
        )
    try:  # the payment task waits for approval: the harness dies mid-task
        await wait_until(lambda: "ASKED" in out.read_text(), timeout=60, what="approval asked")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    restarted = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            _driver(db, url, run_ref, mode, key, "--approve"),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    )
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    finished = json.loads(restarted.stdout.strip().splitlines()[-1])
    assert finished["output"] == f"done: approved {key}"
    assert finished["model_requests"] == 1  # resumed from the saved history: no new tool call
    assert await _payment_count(bridge, key) == 1
