"""A ``CreateTaskResult`` that is already terminal, against the in-repo ADVERSARIAL FAKE (no
real server creates a task terminal: fastmcp-tasks always answers ``working``).

The inline outcome is stored at creation (bounded, scrubbed, ``task.terminal``) and the handle
closes without a poll; a terminal create *without* its outcome stays due, and a ``-32602`` on
the poll that should fetch it loses the handle explicitly instead of forgetting it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bridge import Bridge, BridgeSettings, McpServerConfig, TaskSettled, TaskStatus, events as ev
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import LostReason
from bridge._outcomes import TaskHandle
from tests.support.bridging import FAST, adversarial_stats, event_types, wait_closed
from tests.support.builders import new_run
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"


@pytest.fixture
async def bridge(wall_ledger: Ledger, adversarial_server: ServerProcess) -> AsyncIterator[Bridge]:
    server = McpServerConfig(name="fake", url=adversarial_server.url, request_timeout_s=5.0)
    async with Bridge(
        wall_ledger, BridgeSettings(principals=[P], mcp_servers=[server], scheduler=FAST)
    ) as opened:
        yield opened


async def _gets(server: ServerProcess, tool: str) -> int:
    return (await adversarial_stats(server.url))["gets"].get(tool, 0)


async def test_inline_completed_result_is_stored_returned_and_announced(
    bridge: Bridge, wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(P)
    run = new_run(tenant)
    gets_before = await _gets(adversarial_server, "created_completed")
    step = await bridge.run(P, run.ref).call_tool("fake", "created_completed", {})
    assert isinstance(step, TaskSettled) and step.status is TaskStatus.COMPLETED
    task = step.task
    # Stored scrubbed: the server's text quoted its raw task id, the ledger shows the ref.
    assert step.text() == f"report [{task.ref}] ready at once"
    assert task.task_id not in step.text() and task.terminal_at_ms is not None
    (settled,) = await bridge.run(P, run.ref).wait_for([task.ref], timeout=5)
    assert settled.result == task.result and settled.lost_reason is None
    terminal = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskTerminal)]
    assert len(terminal) == 1 and terminal[0].result == task.result
    assert terminal[0].status is TaskStatus.COMPLETED and not terminal[0].superseded_lost
    assert event_types(tenant, run.ref)[-2:] == ["task.created", "task.terminal"]
    assert not bridge._requester.scheduler.is_watching(task.ref)
    assert await _gets(adversarial_server, "created_completed") == gets_before  # no poll


async def test_failed_with_inline_error_is_stored_at_creation(
    bridge: Bridge, wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(P)
    run = new_run(tenant)
    gets_before = await _gets(adversarial_server, "created_failed")
    outcome = await bridge._requester.call_tool(P, run.ref, "fake", "created_failed", {})
    assert isinstance(outcome, TaskHandle) and not outcome.task.is_open
    task = tenant.reads.get_task(outcome.task_ref)
    assert task.status is TaskStatus.FAILED and task.result is None
    assert task.error == {"code": -32603, "message": f"job [{task.ref}] refused at once"}
    (terminal,) = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskTerminal)]
    assert terminal.status is TaskStatus.FAILED and terminal.error == task.error
    assert await _gets(adversarial_server, "created_failed") == gets_before


async def test_completed_without_its_result_then_not_found_is_lost_not_forgotten(
    bridge: Bridge, wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(P)
    run = new_run(tenant)
    outcome = await bridge._requester.call_tool(P, run.ref, "fake", "created_completed_bare", {})
    assert isinstance(outcome, TaskHandle)
    created = outcome.task
    # No result came with it: still open and due, so tasks/get can fetch the result.
    assert created.status is TaskStatus.COMPLETED and created.is_open
    assert bridge._requester.scheduler.is_watching(created.ref)
    await wait_closed(tenant, created.ref)
    task = tenant.reads.get_task(created.ref)
    assert task.lost_reason is LostReason.NOT_FOUND and task.result is None
    assert task.terminal_at_ms is None  # no outcome was invented
    (lost,) = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskLost)]
    assert lost.task_ref == task.ref and lost.reason is LostReason.NOT_FOUND
    assert "task.terminal" not in event_types(tenant, run.ref)
    assert await _gets(adversarial_server, "created_completed_bare") >= 1
    (settled,) = await bridge.run(P, run.ref).wait_for(
        [task.ref], timeout=5
    )  # lost counts as settled
    assert settled.lost_reason is LostReason.NOT_FOUND


def test_a_terminal_status_without_its_outcome_can_still_be_lost(ledger: Ledger) -> None:
    """Ledger level: lost applies while no terminal outcome is stored, never after."""
    tenant = ledger.for_principal(P)
    run = new_run(tenant)
    for status, stored in ((TaskStatus.COMPLETED, False), (TaskStatus.COMPLETED, True)):
        op = tenant.calls.begin_dispatch(run.ref, server_endpoint="http://s", tool_name="t",
                                         sent=True, arguments={"n": int(stored)})  # fmt: skip
        task = tenant.calls.record_task_created(op.ref, task_id=f"raw-{stored}", status=status)
        if stored:
            tenant.tasks.observe_task(
                task.ref, TaskObservation(status=status, result={"content": []})
            )
        assert tenant.tasks.mark_task_lost(task.ref, LostReason.NOT_FOUND) is (not stored)
        assert (tenant.reads.get_task(task.ref).lost_reason is None) is stored
