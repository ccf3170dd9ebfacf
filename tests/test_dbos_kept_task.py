"""bridge.integrations.dbos: a poll step's first poll starts from the task its previous step
read from the ledger in this process (kept for the observation the workflow holds), not from a
ledger read among every other handle's. A kept task that is stale never hides a change: the
server's changed state is recorded, and what the step returns is the ledger's. Against the
real Tasks server and a SQLite ledger, the steps' code run without DBOS (it is plain async
code under the step decorators)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge import (
    Bridge,
    BridgeSettings,
    Ledger,
    McpServerConfig,
    SchedulerConfig,
    TaskStatus,
    WaitMode,
)
from bridge._ledger.reads.views import TaskView
from bridge._mcp.polling.handle_resumption import HostPoll
from bridge.integrations.dbos import _steps, attach, attached
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"


def _settings(tmp_path: Path, server: ServerProcess) -> BridgeSettings:
    return BridgeSettings(
        ledger_url=str(tmp_path / "ledger.db"),
        principals=[P],
        mcp_servers=[McpServerConfig(name="tasks", url=server.url)],
        scheduler=SchedulerConfig(floor_ms=20),
        recover_on_start=False,
    )


async def _open_task(bridge: Bridge, key: str, seconds: float) -> tuple[str, TaskView]:
    """A task made as the send step makes it, taken out of the bridge's scheduler."""
    run = await bridge.register_served_run(
        P, response_id=f"dbos-{key}", session_id=None, harness_id=None, harness="dbos"
    )
    handle = bridge.run(P, run.ref)
    outcome = await handle.call_tool(
        "tasks", "record_effect", {"key": key, "seconds": seconds}, wait=WaitMode.DETACH
    )
    task: TaskView = outcome.task  # type: ignore[attr-defined]
    assert task.status is TaskStatus.WORKING
    attached().take(task.ref)
    return run.ref, task


async def _until(check: Any, what: str, timeout: float = 30.0) -> None:
    with anyio.fail_after(timeout):
        while not await check():
            await anyio.sleep(0.02)


def _effects(server: ServerProcess) -> list[str]:
    path: Path = server.effects_path  # type: ignore[attr-defined]
    return path.read_text().splitlines() if path.exists() else []


async def test_a_kept_task_is_used_once_and_only_for_the_observation_it_was_read_for(
    tmp_path: Path, tasks_server: ServerProcess
) -> None:
    async with Bridge.open(_settings(tmp_path, tasks_server)) as bridge:
        attach(bridge, P)
        _, task = await _open_task(bridge, "kept-once", 30.0)
        held = {"task_ref": task.ref, "status": task.status.value}
        _steps._remember(task, held)
        assert held["read"]  # the observation names the read it was kept for (no task id)
        assert task.task_id not in str(held)
        assert _steps._recall(held) is task
        assert _steps._recall(held) == task.ref  # used once: a re-run step reads the ledger
        _steps._remember(task, held)
        other = {**held, "read": "another-observation"}
        assert _steps._recall(other) == task.ref  # not the observation it was kept for
        # A closed task is not kept, nor one waiting for input (its answers are read anew).
        _steps._remember(task, held)
        _steps.forget(held)  # the workflow stopped holding it
        assert _steps._recall(held) == task.ref
        await attached().cancel(task.ref, "test")


async def test_a_stale_kept_task_never_hides_the_servers_change(
    tmp_path: Path, tasks_server: ServerProcess
) -> None:
    async with Bridge.open(_settings(tmp_path, tasks_server)) as bridge:
        attach(bridge, P, poll_window_s=30)
        here = attached()
        reader = Ledger.open(tmp_path / "ledger.db")
        tenant = reader.for_principal(P)

        # The server moved on while the workflow slept: the kept task says working, the
        # ledger too; the poll from it records the task's end.
        run_ref, task = await _open_task(bridge, "kept-server", 0.2)
        held = {"task_ref": task.ref, "status": task.status.value}
        _steps._remember(task, held)

        async def effect_done() -> bool:
            return "effect kept-server" in _effects(tasks_server)

        await _until(effect_done, "the server's task to end")
        start = _steps._recall(held)
        assert start is task
        polled, _, _ = await _steps._watch(here, start, HostPoll(), None)
        assert polled.status is TaskStatus.COMPLETED and not polled.is_open
        recorded = tenant.reads.get_task(task.ref)
        assert recorded.status is TaskStatus.COMPLETED and recorded.result == polled.result

        # Another poller recorded the end meanwhile: the kept task is behind the ledger. The
        # poll from it returns the ledger's record, and the end is recorded once.
        run_ref, task = await _open_task(bridge, "kept-ledger", 0.2)
        held = {"task_ref": task.ref, "status": task.status.value}
        _steps._remember(task, held)

        async def recorded_elsewhere() -> bool:
            view, _ = await here.poll(task.ref, HostPoll())  # reads the ledger afresh
            return not view.is_open

        await _until(recorded_elsewhere, "another poll to record the task's end")
        start = _steps._recall(held)
        assert isinstance(start, TaskView) and start.status is TaskStatus.WORKING  # stale
        polled, _, _ = await _steps._watch(here, start, HostPoll(), None)
        assert polled.status is TaskStatus.COMPLETED and not polled.is_open
        events = tenant.reads.events(run_ref)
        ends = [e for e in events if e.type == "task.terminal"]
        assert len(ends) == 1, [e.type for e in events]
        assert not [e for e in events if "anomaly" in e.type], [e.type for e in events]
        reader.close()


async def test_the_next_interval_runs_from_when_the_poll_left(
    tmp_path: Path, tasks_server: ServerProcess
) -> None:
    async with Bridge.open(_settings(tmp_path, tasks_server)) as bridge:
        attach(bridge, P)
        here = attached()
        _, task = await _open_task(bridge, "sent-ago", 30.0)
        before = time.monotonic()
        _, polled = await here.poll(task.ref, HostPoll(), known=task)
        elapsed_ms = (time.monotonic() - before) * 1000
        assert polled.sent_ago_ms is not None and 0 <= polled.sent_ago_ms <= elapsed_ms + 1
        await here.cancel(task.ref, "test")
