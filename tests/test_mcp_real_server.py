"""The MCP side against a real Tasks server (FastMCP + fastmcp-tasks) on 127.0.0.1."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import pytest

from bridge import events as ev
from bridge._config import McpServerConfig
from bridge._errors import InputAlreadyAnswered, ServerConnectFailed, ServerNotReachable
from bridge._ledger.store import Ledger
from bridge._lifecycle import CallState, LostReason, TaskStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._outcomes import InlineResult, RejectedCall, TaskHandle
from tests.support.bridging import FAST, effects, event_types, wait_closed, wait_until
from tests.support.builders import new_run
from tests.support.outage_proxy import outage_proxy
from tests.support.processes import REPO_ROOT, ServerProcess, refused_port

pytestmark = pytest.mark.anyio
PRINCIPAL = "acme"


@pytest.fixture
async def requester(
    wall_ledger: Ledger, tasks_server: ServerProcess
) -> AsyncIterator[TaskRequester]:
    servers = [McpServerConfig(name="tasks", url=tasks_server.url)]
    async with TaskRequester(wall_ledger, servers, scheduler=FAST) as opened:
        yield opened


def _text(result: dict[str, object]) -> str:
    content = result["content"]
    assert isinstance(content, list)
    return str(content[0]["text"])


async def test_long_task_reaches_completed_with_its_result(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant, response_id="resp_long", session_id="hsess_long")
    outcome = await requester.call_tool(
        PRINCIPAL, run.ref, "tasks", "slow_report", {"quarter": "Q3", "seconds": 0.3}
    )
    assert isinstance(outcome, TaskHandle) and outcome.task.status is TaskStatus.WORKING
    handle = tenant.reads.get_task(outcome.task_ref)
    assert (handle.response_id, handle.session_id) == ("resp_long", "hsess_long")
    assert handle.ttl_ms == 900_000 and handle.poll_interval_ms == 50
    await wait_closed(tenant, outcome.task_ref)
    done = tenant.reads.get_task(outcome.task_ref)
    assert done.status is TaskStatus.COMPLETED and _text(done.result) == "report Q3"
    assert tenant.reads.get_dispatch(outcome.op_ref).state is CallState.TASK
    types = event_types(tenant, run.ref)
    assert types[-3:] == ["task.created", "task.status_changed", "task.terminal"]
    assert not requester.scheduler.is_watching(outcome.task_ref)


async def test_inline_tool_result_is_recorded(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "tasks", "echo", {"text": "hi"})
    assert isinstance(outcome, InlineResult) and _text(outcome.result) == "hi"
    assert tenant.reads.get_dispatch(outcome.op_ref).state is CallState.RESULT
    assert event_types(tenant, run.ref)[-1] == "call.result"


async def test_input_required_answered_once_to_completed(
    requester: TaskRequester, wall_ledger: Ledger, tasks_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(
        PRINCIPAL, run.ref, "tasks", "approve_payment", {"amount": 120, "payment_key": "pay-1"}
    )
    assert isinstance(outcome, TaskHandle)
    asked = await wait_until(
        lambda: [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskInputRequired)]
    )
    (request,) = asked
    assert request.method == "elicitation/create" and "pay-1" in request.params["message"]
    # Later polls see the same key again until it is answered: it is never re-surfaced.
    await wait_until(lambda: requester.scheduler.stats.polls >= 3)
    answer = {"action": "accept", "content": {"approve": True}}
    assert (
        await requester.answer_input(PRINCIPAL, outcome.task_ref, request.input_ref, answer)
    ).delivered
    with pytest.raises(InputAlreadyAnswered):
        await requester.answer_input(PRINCIPAL, outcome.task_ref, request.input_ref, answer)
    await wait_closed(tenant, outcome.task_ref)
    done = tenant.reads.get_task(outcome.task_ref)
    assert done.status is TaskStatus.COMPLETED and _text(done.result) == "approved pay-1"
    types = event_types(tenant, run.ref)
    assert types.count("task.input_required") == 1 and types.count("task.input_answered") == 1
    assert effects(tasks_server.effects_path).count("payment pay-1 120") == 1  # type: ignore[attr-defined]
    raw = done.task_id
    assert raw not in json.dumps([e.model_dump(mode="json") for e in tenant.reads.events(run.ref)])


async def test_cancel_is_intent_then_observed(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "tasks", "wait_forever", {})
    assert isinstance(outcome, TaskHandle)
    assert await requester.cancel_task(PRINCIPAL, outcome.task_ref)
    await wait_closed(tenant, outcome.task_ref)
    assert tenant.reads.get_task(outcome.task_ref).status is TaskStatus.CANCELLED
    types = event_types(tenant, run.ref)
    assert types.index("task.cancel_requested") < types.index("task.terminal")


async def test_failed_task_keeps_the_jsonrpc_error(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "tasks", "fail_rpc", {})
    assert isinstance(outcome, TaskHandle)
    await wait_closed(tenant, outcome.task_ref)
    failed = tenant.reads.get_task(outcome.task_ref)
    assert failed.status is TaskStatus.FAILED
    assert failed.error["code"] == -32603 and failed.error["message"] == "backend exploded"


async def test_completed_with_is_error_is_a_completed_task(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "tasks", "tool_error", {})
    assert isinstance(outcome, TaskHandle)
    await wait_closed(tenant, outcome.task_ref)
    done = tenant.reads.get_task(outcome.task_ref)
    assert done.status is TaskStatus.COMPLETED and done.result["isError"] is True
    terminal = tenant.reads.events(run.ref)[-1]
    assert isinstance(terminal, ev.TaskTerminal) and terminal.result["isError"] is True


async def test_detach_stops_watching_without_cancelling(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "tasks", "wait_forever", {})
    assert isinstance(outcome, TaskHandle)
    assert await requester.detach_task(PRINCIPAL, outcome.task_ref)
    assert not requester.scheduler.is_watching(outcome.task_ref)
    detached = tenant.reads.get_task(outcome.task_ref)
    assert detached.status is TaskStatus.WORKING and detached.cancel_requested_at_ms is None
    assert "task.detached" in event_types(tenant, run.ref)


async def test_unreachable_server_refuses_before_recording(wall_ledger: Ledger) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with refused_port() as port:
        dead = McpServerConfig(name="dead", url=f"http://127.0.0.1:{port}/mcp", connect_timeout_s=2)
        async with TaskRequester(wall_ledger, [dead], scheduler=FAST) as requester:
            with pytest.raises(ServerConnectFailed):
                await requester.call_tool(PRINCIPAL, run.ref, "dead", "echo", {"text": "x"})
    assert tenant.reads.list_dispatches(run_ref=run.ref) == []  # nothing sent, nothing ambiguous


async def test_a_handshake_never_answered_is_given_up_and_leaves_nothing_running(
    wall_ledger: Ledger,
) -> None:
    """A fake, named so: a port that reads and never answers (no real MCP server does this
    on purpose; a hung process does). The connect gives up after its timeout and the abandoned
    handshake is stopped then, its connection closed, not left waiting for an answer."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    held: list[anyio.abc.SocketStream] = []
    dropped = anyio.Event()

    async def hold(stream: anyio.abc.SocketStream) -> None:
        held.append(stream)
        try:
            while True:
                await stream.receive()  # read everything, answer nothing
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            dropped.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    silent = McpServerConfig(
        name="silent",
        url=f"http://127.0.0.1:{port}/mcp",
        connect_timeout_s=1,
        request_timeout_s=60,
    )
    async with anyio.create_task_group() as serving:
        serving.start_soon(listener.serve, hold)
        with anyio.fail_after(30):
            async with TaskRequester(wall_ledger, [silent], scheduler=FAST) as requester:
                with pytest.raises(ServerNotReachable):
                    await requester.call_tool(PRINCIPAL, run.ref, "silent", "echo", {"text": "x"})
                with anyio.fail_after(5):  # without the cancel: when its own handshake times out
                    await dropped.wait()
        assert held  # the handshake did reach the port
        serving.cancel_scope.cancel()
    assert tenant.reads.list_dispatches(run_ref=run.ref) == []


@pytest.mark.e2e
async def test_server_restart_loses_the_handle_explicitly(
    wall_ledger: Ledger, tmp_path: Path
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with ServerProcess("tests.servers.tasks_server") as server:
        servers = [McpServerConfig(name="tasks", url=server.url)]
        async with TaskRequester(wall_ledger, servers, scheduler=FAST) as requester:
            outcome = await requester.call_tool(PRINCIPAL, run.ref, "tasks", "wait_forever", {})
            assert isinstance(outcome, TaskHandle)
            server.restart()  # memory:// backend: every task is gone (-32602 from now on)
            await wait_closed(tenant, outcome.task_ref)
    lost = tenant.reads.get_task(outcome.task_ref)
    assert lost.lost_reason is LostReason.NOT_FOUND and lost.status is TaskStatus.WORKING
    event = tenant.reads.events(run.ref)[-1]
    assert isinstance(event, ev.TaskLost) and event.reason is LostReason.NOT_FOUND
    assert lost.result is None  # never turned into success


@pytest.mark.e2e
async def test_a_discovery_lost_to_a_restart_does_not_pin_the_legacy_protocol(
    wall_ledger: Ledger,
) -> None:
    """The server restarts (its tasks forgotten) and comes back just after the bridge's
    ``server/discover`` went unanswered: the connection must not fall back to the 2025-11-25
    handshake (where ``tasks/get`` is -32601 for good), so the handle is reported lost."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    with ServerProcess("tests.servers.tasks_server") as server:
        async with outage_proxy(server.port) as proxy:
            servers = [McpServerConfig(name="tasks", url=proxy.url)]
            async with TaskRequester(wall_ledger, servers, scheduler=FAST) as requester:
                outcome = await requester.call_tool(PRINCIPAL, run.ref, "tasks", "wait_forever", {})
                assert isinstance(outcome, TaskHandle)
                connection = requester.pool.connection("tasks")
                assert connection.info.protocol_version == "2026-07-28"
                proxy.go_down(until_dropped=b"server/discover")
                server.restart()  # memory:// backend: every task is gone
                await wait_until(lambda: not proxy.down, timeout=30, what="discover dropped")
                await wait_closed(tenant, outcome.task_ref, timeout=30)
                assert connection.info.protocol_version == "2026-07-28"
    lost = tenant.reads.get_task(outcome.task_ref)
    assert lost.lost_reason is LostReason.NOT_FOUND and lost.status is TaskStatus.WORKING


async def test_stdio_transport_runs_a_task_to_completion(wall_ledger: Ledger) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    stdio = McpServerConfig(
        name="tasks-stdio",
        command=sys.executable,
        args=("-m", "tests.servers.tasks_server", "--stdio"),
        env={"PYTHONPATH": str(REPO_ROOT)},
        connect_timeout_s=30,
    )
    async with TaskRequester(wall_ledger, [stdio], scheduler=FAST) as requester:
        outcome = await requester.call_tool(
            PRINCIPAL, run.ref, "tasks-stdio", "slow_report", {"quarter": "Q1", "seconds": 0.1}
        )
        assert isinstance(outcome, TaskHandle)
        await wait_closed(tenant, outcome.task_ref)
    done = tenant.reads.get_task(outcome.task_ref)
    assert done.status is TaskStatus.COMPLETED and _text(done.result) == "report Q1"
    assert done.server_endpoint.startswith("stdio:")


async def test_task_only_tool_without_the_declaration_is_rejected_missing_capability(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(
        PRINCIPAL, run.ref, "tasks", "slow_report", {"quarter": "Q2"}, declare_tasks=False
    )
    assert isinstance(outcome, RejectedCall) and outcome.missing_tasks_capability
    assert outcome.code == -32021
    dispatch = tenant.reads.get_dispatch(outcome.op_ref)
    assert dispatch.state is CallState.RESULT and dispatch.result["error"]["code"] == -32021
    assert tenant.reads.list_tasks(run_ref=run.ref) == []


async def test_a_held_scheduler_starts_no_poll_until_released(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    outcome = await requester.call_tool(PRINCIPAL, run.ref, "tasks", "wait_forever", {})
    assert isinstance(outcome, TaskHandle)
    scheduler = requester.scheduler
    await wait_until(lambda: scheduler.stats.polls >= 2)
    scheduler.hold()
    await wait_until(lambda: scheduler.in_flight == 0, what="polls in flight finished")
    polls_when_held = scheduler.stats.polls
    held_at = time.monotonic()
    # The handle (polled every ~50 ms) falls due several times over while held.
    await wait_until(lambda: time.monotonic() - held_at > 10 * FAST.default_interval_ms / 1000)
    assert scheduler.stats.polls == polls_when_held
    assert scheduler.is_watching(outcome.task_ref)
    scheduler.release()
    await wait_until(lambda: scheduler.stats.polls > polls_when_held, timeout=30)
