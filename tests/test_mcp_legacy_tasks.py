"""The MCP side against a real server of the 2025-11-25 generation (experimental core tasks).

The server is the official SDK 1.30 (:mod:`tests.servers.legacy_tasks_server_2025_11_25`),
run from its own venv (:mod:`tests.support.legacy_venv`). The bridge must notice from
``initialize`` that the server speaks 2025-11-25 tasks and speak them: ``params.task`` on tools
that allow it, ``tasks/get`` for status, ``tasks/result`` once terminal, ``tasks/cancel``; never
``tasks/list``. The server counts every JSON-RPC method it receives (its ``stats`` tool).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mcp import Client

from bridge import Bridge, BridgeSettings, WaitMode
from bridge._config import McpServerConfig
from bridge._ledger.reads.views import RunView
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import CallState, LostReason, TaskStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._mcp.wire.generations import EXPERIMENTAL_TASKS_VERSION
from bridge._outcomes import InlineResult, TaskHandle
from bridge._runtime.step_results import TaskPending
from tests.support.bridging import FAST, effects, event_types, wait_closed, wait_until
from tests.support.builders import new_run
from tests.support.legacy_venv import LegacyServerProcess, ensure_legacy_venv

pytestmark = pytest.mark.anyio
PRINCIPAL = "acme"
MODULE = "tests.servers.legacy_tasks_server_2025_11_25"


@pytest.fixture(scope="session")
def legacy_python() -> Path:
    """The legacy venv's interpreter (built on first use, then reused)."""
    return ensure_legacy_venv()


@pytest.fixture
def legacy_server(legacy_python: Path, tmp_path: Path) -> Iterator[LegacyServerProcess]:
    effects_file = tmp_path / "effects.log"
    server = LegacyServerProcess(
        MODULE, python=legacy_python, args=["--effects-file", str(effects_file)]
    )
    server.effects_path = effects_file  # type: ignore[attr-defined]
    with server:
        yield server


@pytest.fixture
async def requester(
    wall_ledger: Ledger, legacy_server: LegacyServerProcess
) -> AsyncIterator[TaskRequester]:
    servers = [McpServerConfig(name="legacy", url=legacy_server.url)]
    async with TaskRequester(wall_ledger, servers, scheduler=FAST) as opened:
        yield opened


async def _methods(server: LegacyServerProcess) -> dict[str, int]:
    """What the server received so far, per JSON-RPC method (its own counters)."""
    async with Client(server.url) as client:
        result = await client.call_tool("stats", {})
    counts: dict[str, int] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return counts


def _text(result: dict[str, object]) -> str:
    content = result["content"]
    assert isinstance(content, list)
    return str(content[0]["text"])


async def test_long_call_is_a_recorded_handle_polled_to_its_result(
    requester: TaskRequester, wall_ledger: Ledger, legacy_server: LegacyServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant, response_id="resp_legacy", session_id="hsess_legacy")
    outcome = await requester.call_tool(
        PRINCIPAL, run.ref, "legacy", "slow_report", {"quarter": "Q3", "seconds": 0.3}
    )
    assert isinstance(outcome, TaskHandle) and outcome.task.status is TaskStatus.WORKING
    handle = tenant.reads.get_task(outcome.task_ref)  # committed before it was handed out
    assert handle.task_generation == EXPERIMENTAL_TASKS_VERSION
    # ttl/pollInterval became ttlMs/pollIntervalMs: the server capped the hour asked for.
    assert handle.ttl_ms == 600_000 and handle.poll_interval_ms == 500
    assert handle.status_message == "accepted"
    await wait_closed(tenant, outcome.task_ref)
    done = tenant.reads.get_task(outcome.task_ref)
    assert done.status is TaskStatus.COMPLETED and _text(done.result) == "report Q3"
    assert "_meta" not in done.result  # related-task (the raw task id) is never stored
    assert tenant.reads.get_dispatch(outcome.op_ref).state is CallState.TASK
    assert event_types(tenant, run.ref)[-3:] == [
        "task.created",
        "task.status_changed",
        "task.terminal",
    ]
    methods = await _methods(legacy_server)
    assert methods["tools/call"] == 1 and methods["tasks/result"] == 1
    assert methods["tasks/get"] >= 1 and "tasks/list" not in methods


async def test_a_tool_without_task_support_is_called_plainly(
    requester: TaskRequester, wall_ledger: Ledger, legacy_server: LegacyServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "legacy", "echo", {"text": "hi"})
    assert isinstance(outcome, InlineResult) and _text(outcome.result) == "hi"
    assert tenant.reads.list_tasks() == []
    methods = await _methods(legacy_server)
    assert methods["tools/call"] == 1 and methods["tools/list"] == 1  # taskSupport looked up
    assert not {"tasks/get", "tasks/result", "tasks/list"} & set(methods)


async def test_an_effect_runs_once_and_a_replay_sends_nothing(
    requester: TaskRequester, wall_ledger: Ledger, legacy_server: LegacyServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    first = await requester.call_tool(
        PRINCIPAL, run.ref, "legacy", "count_effect", {"label": "paid"}, operation_id="pay-1"
    )
    assert isinstance(first, TaskHandle)
    await wait_closed(tenant, first.task_ref)
    again = await requester.call_tool(
        PRINCIPAL, run.ref, "legacy", "count_effect", {"label": "paid"}, operation_id="pay-1"
    )
    assert isinstance(again, TaskHandle) and again.replayed
    assert again.task.status is TaskStatus.COMPLETED and _text(again.task.result) == "effect paid"
    assert effects(legacy_server.effects_path) == ["paid"]  # type: ignore[attr-defined]
    methods = await _methods(legacy_server)
    assert methods["tools/call"] == 1 and "tasks/list" not in methods


async def _parked_task(
    requester: TaskRequester, ledger: Ledger
) -> tuple[TenantLedger, RunView, TaskHandle]:
    """A ``wait_forever`` task: it ends only when cancelled (or its server goes)."""
    tenant = ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "legacy", "wait_forever", {})
    assert isinstance(outcome, TaskHandle)
    return tenant, run, outcome


@pytest.mark.e2e  # the server is SIGKILLed and restarted
async def test_a_server_restart_loses_the_handle(
    requester: TaskRequester, wall_ledger: Ledger, legacy_server: LegacyServerProcess
) -> None:
    tenant, run, outcome = await _parked_task(requester, wall_ledger)
    legacy_server.restart()  # in-memory task store gone: tasks/get answers -32602
    await wait_closed(tenant, outcome.task_ref)
    lost = tenant.reads.get_task(outcome.task_ref)
    assert lost.lost_reason is LostReason.NOT_FOUND and lost.status is TaskStatus.WORKING
    assert event_types(tenant, run.ref)[-1] == "task.lost"
    assert "tasks/list" not in await _methods(legacy_server)


async def test_cancel_is_sent_and_the_cancelled_status_observed(
    requester: TaskRequester, wall_ledger: Ledger, legacy_server: LegacyServerProcess
) -> None:
    tenant, run, outcome = await _parked_task(requester, wall_ledger)
    assert await requester.cancel_task(PRINCIPAL, outcome.task_ref)
    await wait_closed(tenant, outcome.task_ref)
    cancelled = tenant.reads.get_task(outcome.task_ref)
    assert cancelled.status is TaskStatus.CANCELLED and cancelled.lost_reason is None
    types = event_types(tenant, run.ref)
    assert types.index("task.cancel_requested") < types.index("task.terminal")
    path = legacy_server.effects_path  # type: ignore[attr-defined]
    await wait_until(lambda: effects(path) == ["wait_forever stopped"], what="work stopped")
    methods = await _methods(legacy_server)
    assert methods["tasks/cancel"] == 1 and "tasks/list" not in methods
    assert "tasks/result" not in methods  # a cancelled task has no result to fetch


@pytest.mark.e2e  # the bridge is closed and reopened on one ledger
async def test_a_restarted_bridge_resumes_a_legacy_handle(
    tmp_path: Path, legacy_server: LegacyServerProcess
) -> None:
    ledger_path = tmp_path / "bridge.db"
    servers = [McpServerConfig(name="legacy", url=legacy_server.url)]
    async with Bridge.open(
        BridgeSettings(
            ledger_url=ledger_path, principals=[PRINCIPAL], mcp_servers=servers, scheduler=FAST
        )
    ) as first:
        run = await first.register_served_run(
            PRINCIPAL, response_id="resp_resume", session_id="hsess_resume", harness_id="chrn_t"
        )
        step = await run.call_tool(
            "legacy",
            "slow_report",
            {"quarter": "Q4", "seconds": 1.5},
            wait=WaitMode.DETACH,
        )
        assert isinstance(step, TaskPending)
    task_ref = step.task.ref
    between = Ledger.open(ledger_path)
    try:
        assert between.for_principal(PRINCIPAL).reads.get_task(task_ref).is_open
    finally:
        between.close()
    async with Bridge.open(
        BridgeSettings(
            ledger_url=ledger_path, principals=[PRINCIPAL], mcp_servers=servers, scheduler=FAST
        )
    ) as second:
        await wait_until(
            lambda: not second._ledger.for_principal(PRINCIPAL).reads.get_task(task_ref).is_open,
            what="resumed handle settled",
        )
        done = await second.run(PRINCIPAL, run.ref).task(task_ref)
    assert done.status is TaskStatus.COMPLETED and _text(done.result) == "report Q4"
    assert done.task_generation == EXPERIMENTAL_TASKS_VERSION
    methods = await _methods(legacy_server)
    assert methods["tasks/result"] == 1 and "tasks/list" not in methods
