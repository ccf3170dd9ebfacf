"""Push updates (``subscriptions/listen`` with ``taskIds`` → ``notifications/tasks``) against a
real HTTP server that pushes (``tests.servers.push_tasks_server``, official SDK) and one that
does not (fastmcp-tasks)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
from mcp import Client

from bridge import events as ev
from bridge.ledger.store import Ledger
from bridge.lifecycle import TaskStatus
from bridge.mcp.outcomes import TaskHandle
from bridge.mcp.requester import TaskRequester
from bridge.mcp.scheduler import SchedulerConfig
from bridge.mcp.servers import McpServerConfig
from tests.support.bridging import FAST, event_types, wait_closed, wait_until
from tests.support.builders import new_run
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
PRINCIPAL = "acme"
SLOW_POLL_MS = 30_000  # what the push server asks for: a poll is due only after 30 s
# The server's 30 s is honoured (the ceiling is not lower), so only a push can settle early.
HONOURING = SchedulerConfig(ceiling_ms=SLOW_POLL_MS, backoff_base_ms=50, backoff_max_ms=300)


@pytest.fixture(scope="module")
def push_server() -> Iterator[ServerProcess]:
    with ServerProcess("tests.servers.push_tasks_server") as server:
        yield server


async def server_stats(url: str) -> dict[str, dict[str, int]]:
    async with Client(url) as client:
        result = await client.call_tool("stats", {})
    counts: dict[str, dict[str, int]] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return counts


@pytest.fixture
async def requester(wall_ledger: Ledger, push_server: ServerProcess) -> AsyncIterator[TaskRequester]:
    servers = [McpServerConfig(name="push", url=push_server.url)]
    async with TaskRequester(wall_ledger, servers, scheduler=HONOURING) as opened:
        yield opened


async def _start(requester: TaskRequester, run_ref: str, tool: str, **args: object) -> TaskHandle:
    outcome = await requester.call_tool(PRINCIPAL, run_ref, "push", tool, dict(args))
    assert isinstance(outcome, TaskHandle)
    return outcome


async def test_completion_arrives_by_push_long_before_the_next_poll(
    requester: TaskRequester,
    wall_ledger: Ledger,
    push_server: ServerProcess,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    before = (await server_stats(push_server.url))["gets"].get("push_job", 0)
    started = time.monotonic()
    handle = await _start(requester, run.ref, "push_job", seconds=1.0, poll_ms=SLOW_POLL_MS)
    # Ledger row before any event or wake-up: the commit listener (what wakes every waiter)
    # finds the terminal row and its result already committed when task.terminal is appended.
    seen: list[tuple[TaskStatus, object]] = []
    settled = anyio.Event()

    def on_commit(principal: str, run_ref: str, seq: int) -> None:
        if run_ref == run.ref and isinstance(tenant.events(run.ref)[-1], ev.TaskTerminal):
            row = tenant.get_task(handle.task_ref)
            seen.append((row.status, row.result))
            settled.set()

    wall_ledger.add_listener(on_commit)
    try:
        with anyio.fail_after(SLOW_POLL_MS / 1000 / 3):  # well under the 30 s poll interval
            await settled.wait()
    finally:
        wall_ledger.remove_listener(on_commit)
    assert time.monotonic() - started < SLOW_POLL_MS / 1000 / 3
    assert seen == [(TaskStatus.COMPLETED, {"content": [{"type": "text", "text": "done push_job"}]})]
    assert not requester.scheduler.is_watching(handle.task_ref)
    assert requester.push.stats.applied >= 1 and requester.push.stats.listens >= 1
    after = (await server_stats(push_server.url))["gets"].get("push_job", 0)
    assert after == before  # settled without a single tasks/get
    raw = tenant.get_task(handle.task_ref).task_id
    assert raw not in caplog.text  # the listen request names it: the logs must not
    assert raw not in json.dumps([e.model_dump(mode="json") for e in tenant.events(run.ref)])
