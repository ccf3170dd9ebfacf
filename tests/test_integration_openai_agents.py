"""The OpenAI Agents SDK on the bridge (``bridge.integrations.openai_agents``), against the
real example MCP servers over HTTP with a deterministic model (no network, no API key): a long
task waited for and detached (parked as an interruption, resumed when it settles), approvals
answered by a simulated human (through the SDK's interruptions, and by a concurrent subscriber
while the turn blocks), a SIGKILLed harness process resuming its saved run with exactly one
payment, and a lost task reported to the model as lost."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent, RunConfig, Runner, RunResult, set_tracing_disabled
from agents.exceptions import UserError

from bridge import (
    Bridge,
    BridgeSettings,
    InlineResult,
    McpServerConfig,
    TaskStatus,
    WaitMode,
    events as ev,
)
from bridge.integrations.openai_agents import (
    STATE_NAME,
    BridgedMCPServer,
    ParkedCall,
    bridged_run,
    load_run_state,
    parked_calls,
    resume_when_settled,
    run_to_completion,
    save_run_state,
)
from tests.support.bridging import FAST
from tests.support.example_servers import example_servers
from tests.support.openai_agents_model import PlannedCall, PlannedToolsModel
from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
TOKEN = "agents-sdk-secret"
NO_TRACES = RunConfig(tracing_disabled=True)
set_tracing_disabled(True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with example_servers(tmp_path_factory.mktemp("payments") / "payments.db", TOKEN) as procs:
        yield procs


def _open(db: Path, servers: dict[str, ServerProcess], **kw: Any) -> Any:
    configs = [McpServerConfig(name=n, url=s.url, credential_ref="ex") for n, s in servers.items()]
    return Bridge.open(BridgeSettings(
        ledger_url=db, principals=[P], mcp_servers=configs, credentials={"ex": TOKEN}.get,
        scheduler=FAST, **kw,
    ))  # fmt: skip


@pytest.fixture
async def bridge(tmp_path: Path, servers: dict[str, ServerProcess]) -> AsyncIterator[Bridge]:
    async with _open(tmp_path / "ledger.db", servers) as opened:
        yield opened


async def _new_run(bridge: Bridge) -> str:
    name = uuid.uuid4().hex[:8]
    run = await bridge.register_served_run(
        P, response_id=f"resp_{name}", session_id=f"hsess{name}", harness_id="chrn_agents"
    )
    return run.ref


def _report_call(seconds: float = 0.3) -> PlannedCall:
    args = {"quarter": "Q3", "sections": 2, "seconds_per_section": seconds}
    return PlannedCall("call_report", "generate_report", args)


def _payment_call(key: str) -> PlannedCall:
    payment = {"amount": 120, "currency": "EUR", "payee": "ACME", "payment_key": key}
    return PlannedCall("call_pay", "approve_payment", payment)


async def _payment_count(bridge: Bridge, run_ref: str, key: str) -> int:
    step = await bridge.run(P, run_ref).call_tool("payments", "payment_count", {"payment_key": key})
    assert isinstance(step, InlineResult)
    return int(step.text())


async def test_a_long_task_blocks_the_turn_in_wait_mode(bridge: Bridge) -> None:
    run_ref = await _new_run(bridge)
    model = PlannedToolsModel([_report_call()])
    server = BridgedMCPServer(bridge, "reports", wait=WaitMode.WAIT)
    agent = Agent(name="analyst", model=model, mcp_servers=[server])
    with bridged_run(run_ref, principal=P):
        result = await Runner.run(agent, "write the Q3 report", run_config=NO_TRACES)
    assert not result.interruptions and model.turns == 2
    assert result.final_output.startswith("generate_report: Quarterly report Q3")
    record = await bridge.run(P, run_ref).operation(
        f"{run_ref}:call_report"
    )  # the tool call's operation
    assert record is not None and record.task is not None
    assert record.task.status is TaskStatus.COMPLETED
    assert {t.name for t in server.cached_tools or []} >= {"generate_report"}


async def test_detach_parks_the_call_and_resumes_when_the_task_settles(bridge: Bridge) -> None:
    run_ref = await _new_run(bridge)
    model = PlannedToolsModel([_report_call(seconds=0.5)])
    server = BridgedMCPServer(bridge, "reports", wait=WaitMode.DETACH)
    agent = Agent(name="analyst", model=model, mcp_servers=[server])
    with bridged_run(run_ref, principal=P):
        result = await Runner.run(agent, "write the Q3 report", run_config=NO_TRACES)
        [item] = result.interruptions  # the turn ended: the task works on, watched
        state = result.to_state()
        [parked] = await parked_calls(bridge, state)
        assert parked.item.raw_item == item.raw_item and not parked.asks
        assert parked.operation_id == f"{run_ref}:call_report"
        assert parked.task is not None and parked.task.is_open
        assert await resume_when_settled(bridge, state, timeout=30) == []
        resumed = await Runner.run(agent, state, run_config=NO_TRACES)
    assert not resumed.interruptions and model.turns == 2
    assert resumed.final_output.startswith("generate_report: Quarterly report Q3")
    record = await bridge.run(P, run_ref).operation(f"{run_ref}:call_report")
    assert record is not None and record.operation_id == f"{run_ref}:call_report"


async def test_an_approval_is_an_interruption_the_human_answers_typed(bridge: Bridge) -> None:
    run_ref = await _new_run(bridge)
    key = f"pay-{uuid.uuid4().hex[:8]}"
    model = PlannedToolsModel([_payment_call(key)])
    agent = Agent(name="clerk", model=model, mcp_servers=[BridgedMCPServer(bridge, "payments")])
    with bridged_run(run_ref, principal=P):
        result = await Runner.run(agent, "pay the invoice", run_config=NO_TRACES)
        state = result.to_state()
        version = await save_run_state(bridge, state)
        [parked] = await parked_calls(bridge, state)
        [question] = parked.inputs
        assert question.message is not None and key in question.message
        assert question.requested_schema is not None
        assert "approve" in question.requested_schema["properties"]
        assert await _payment_count(bridge, run_ref, key) == 0  # nothing paid while parked

        async def human() -> None:  # a concurrent answerer, as a UI would be
            await question.accept({"approve": True})

        async with anyio.create_task_group() as tg:
            tg.start_soon(human)
            settled = await resume_when_settled(bridge, state, timeout=30, answered_elsewhere=True)
            assert settled == []
        await save_run_state(bridge, state, expected_version=version)
        resumed = await Runner.run(agent, state, run_config=NO_TRACES)
    assert resumed.final_output == f"approve_payment: approved {key}"
    assert await _payment_count(bridge, run_ref, key) == 1
    saved = await bridge.run(P, run_ref).agent_state(STATE_NAME)
    assert saved is not None and saved.version == version + 1


async def test_a_declined_approval_reaches_the_model_as_the_server_said(bridge: Bridge) -> None:
    run_ref = await _new_run(bridge)
    key = f"pay-{uuid.uuid4().hex[:8]}"
    model = PlannedToolsModel([_payment_call(key)])
    agent = Agent(name="clerk", model=model, mcp_servers=[BridgedMCPServer(bridge, "payments")])

    async def decline(parked: ParkedCall) -> None:
        await parked.inputs[0].decline()

    with bridged_run(run_ref, principal=P):
        result = await run_to_completion(
            bridge, agent, "pay", ask_human=decline, run_config=NO_TRACES, settle_timeout=30
        )
    assert isinstance(result, RunResult)
    assert result.final_output == f"approve_payment: declined {key}"
    assert await _payment_count(bridge, run_ref, key) == 0


async def test_wait_mode_without_interruptions_needs_a_concurrent_subscriber(
    bridge: Bridge,
) -> None:
    run_ref = await _new_run(bridge)
    key = f"pay-{uuid.uuid4().hex[:8]}"
    model = PlannedToolsModel([_payment_call(key)])
    server = BridgedMCPServer(bridge, "payments", wait=WaitMode.WAIT, approvals=False)
    agent = Agent(name="clerk", model=model, mcp_servers=[server])

    async def subscriber() -> None:  # the turn blocks: something else must answer
        async for event in bridge.run(P, run_ref).subscribe():
            if isinstance(event, ev.TaskInputRequired):
                await bridge.run(P, event.run_ref).input_request(event).accept({"approve": True})
                return

    with bridged_run(run_ref, principal=P):
        async with anyio.create_task_group() as tg:
            tg.start_soon(subscriber)
            result = await Runner.run(agent, "pay", run_config=NO_TRACES)
    assert not result.interruptions
    assert result.final_output == f"approve_payment: approved {key}"
    assert await _payment_count(bridge, run_ref, key) == 1


async def test_a_lost_task_is_reported_to_the_model_as_lost(
    bridge: Bridge, servers: dict[str, ServerProcess]
) -> None:
    run_ref = await _new_run(bridge)
    model = PlannedToolsModel([_report_call(seconds=5)])
    server = BridgedMCPServer(bridge, "reports", wait=WaitMode.DETACH)
    agent = Agent(name="analyst", model=model, mcp_servers=[server])
    with bridged_run(run_ref, principal=P):
        result = await Runner.run(agent, "write the report", run_config=NO_TRACES)
        state = result.to_state()
        await anyio.to_thread.run_sync(servers["reports"].restart)  # its tasks were in memory
        assert await resume_when_settled(bridge, state, timeout=30) == []
        resumed = await Runner.run(agent, state, run_config=NO_TRACES)
    assert resumed.final_output.startswith("generate_report: task lost (not_found)")
    assert "outcome is unknown" in resumed.final_output


def _driver(db: Path, payments: ServerProcess, run_ref: str, key: str, *crash: str) -> Any:
    command = [
        *(sys.executable, "-m", "tests.support.openai_agents_driver", "--db", str(db)),
        *("--payments-url", payments.url, "--token", TOKEN, "--run-ref", run_ref),
        *("--payment-key", key, *crash),
    ]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=90)


async def test_a_sigkilled_harness_resumes_its_run_and_pays_once(
    tmp_path: Path, servers: dict[str, ServerProcess]
) -> None:
    db = tmp_path / "ledger.db"
    key = f"pay-{uuid.uuid4().hex[:8]}"
    async with _open(db, servers) as bridge:
        run_ref = await _new_run(bridge)
    payments = servers["payments"]
    crashed = await anyio.to_thread.run_sync(
        lambda: _driver(db, payments, run_ref, key, "--crash-after-answer")
    )
    assert crashed.returncode == -9, crashed.stderr  # killed with the answer recorded
    assert "asked: Approve payment" in crashed.stdout and "FINAL" not in crashed.stdout
    async with _open(db, servers, recover_on_start=False) as bridge:
        saved = await bridge.run(P, run_ref).agent_state(STATE_NAME)
        assert saved is not None  # the parked run state, saved before the human answered
    restarted = await anyio.to_thread.run_sync(lambda: _driver(db, payments, run_ref, key))
    assert restarted.returncode == 0, restarted.stderr
    assert f"FINAL approve_payment: approved {key}" in restarted.stdout
    assert "asked:" not in restarted.stdout  # the recorded answer was resent, not asked again
    async with _open(db, servers) as bridge:
        assert await _payment_count(bridge, run_ref, key) == 1
        agent = Agent(name="clerk", model=PlannedToolsModel([]))
        with bridged_run(run_ref, principal=P):
            state = await load_run_state(bridge, agent)
        assert state is not None


async def test_list_tools_needs_a_principal_not_a_run_context(bridge: Bridge) -> None:
    """Outside ``bridged_run`` the server's own principal lists the tools (an agent is often
    built before any run exists); with neither, the error names both ways to give one."""
    listed = await BridgedMCPServer(bridge, "reports", principal="acme").list_tools()
    assert "generate_report" in {tool.name for tool in listed}
    with pytest.raises(UserError, match=r"BridgedMCPServer\(\.\.\., principal=\)"):
        await BridgedMCPServer(bridge, "reports").list_tools()
