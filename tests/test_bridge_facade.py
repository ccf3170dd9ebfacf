"""The Bridge facade against real servers: two lifecycles reconciled separately, explicit
policies, subscriptions that resume, and recovery."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge import (
    Bridge,
    BridgeSettings,
    McpServerConfig,
    OnOuterCancel,
    OnOuterEnd,
    OuterStatus,
    Policies,
    RecoverableFailure,
    Run,
    TaskPending,
    TaskSettled,
    TaskStatus,
    UhpServerConfig,
    WaitMode,
    events as ev,
)
from bridge._ledger.store import Ledger
from tests.support.bridging import FAST, wait_closed, wait_until
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"


def _servers(server: ServerProcess) -> list[McpServerConfig]:
    return [McpServerConfig(name="tasks", url=server.url)]


@pytest.fixture
async def bridge(wall_ledger: Ledger, tasks_server: ServerProcess) -> AsyncIterator[Bridge]:
    async with _bridge(wall_ledger, tasks_server) as opened:
        yield opened


def _bridge(ledger: Ledger, server: ServerProcess, **options: Any) -> Bridge:
    """A bridge on ``ledger`` for principal P, polling the test Tasks ``server`` quickly."""
    return Bridge(
        ledger,
        BridgeSettings(principals=[P], mcp_servers=_servers(server), scheduler=FAST, **options),
    )


async def _served_run(bridge: Bridge, name: str) -> str:
    run = await bridge.register_served_run(
        P, response_id=f"resp_{name}", session_id=f"hsess_{name}", harness_id="chrn_test"
    )
    return run.ref


def _types(ledger: Ledger, run_ref: str) -> list[str]:
    return [e.type for e in ledger.for_principal(P).reads.events(run_ref)]


def _gapless(ledger: Ledger, run_ref: str) -> None:
    seqs = [e.seq for e in ledger.for_principal(P).reads.events(run_ref)]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_wait_policy_returns_the_settled_task(bridge: Bridge, wall_ledger: Ledger) -> None:
    run_ref = await _served_run(bridge, "wait")
    step = await bridge.run(P, run_ref).call_tool(
        "tasks", "slow_report", {"quarter": "Q1", "seconds": 0.2}
    )
    assert isinstance(step, TaskSettled) and step.status is TaskStatus.COMPLETED
    assert step.task.result["content"][0]["text"] == "report Q1"
    # The inner task finishing does not finish the outer response.
    assert wall_ledger.for_principal(P).reads.get_run(run_ref).status is OuterStatus.IN_PROGRESS


async def test_wait_deadline_is_a_recoverable_failure_not_a_result(
    bridge: Bridge, wall_ledger: Ledger
) -> None:
    run_ref = await _served_run(bridge, "deadline")
    step = await bridge.run(P, run_ref).call_tool("tasks", "wait_forever", {}, wait_deadline_s=0.3)
    assert isinstance(step, RecoverableFailure) and "deadline" in step.reason
    task = wall_ledger.for_principal(P).reads.get_task(step.task.ref)
    assert task.is_open and task.result is None  # still watched, nothing invented
    assert "step.recoverable_failure" in _types(wall_ledger, run_ref)
    await (await bridge.run_of(P, step.task.ref)).cancel_task(step.task.ref)


async def test_detach_continues_and_delivers_the_result_later(
    bridge: Bridge, wall_ledger: Ledger
) -> None:
    run_ref = await _served_run(bridge, "detach")
    step = await bridge.run(P, run_ref).call_tool(
        "tasks", "slow_report", {"quarter": "Q2", "seconds": 0.3}, wait=WaitMode.DETACH
    )
    assert isinstance(step, TaskPending) and step.task.is_open
    terminal = None
    async for event in bridge.run(P, run_ref).subscribe():
        if isinstance(event, ev.TaskTerminal) and event.task_ref == step.task.ref:
            terminal = event
            break
    assert terminal is not None and terminal.status is TaskStatus.COMPLETED
    assert terminal.result["content"][0]["text"] == "report Q2"


async def test_ask_waits_for_the_hosts_answer(bridge: Bridge, wall_ledger: Ledger) -> None:
    run_ref = await _served_run(bridge, "ask")

    async def host() -> None:  # the host answers under its own policy, via the bridge
        async for event in bridge.run(P, run_ref).subscribe():
            if isinstance(event, ev.TaskInputRequired):
                await anyio.sleep(2.0)  # a human takes a while: not counted against the wait
                await bridge.run(P, run_ref).input_request(event).accept({"approve": True})
                return

    async with anyio.create_task_group() as group:
        group.start_soon(host)
        step = await bridge.run(P, run_ref).call_tool(
            "tasks",
            "approve_payment",
            {"amount": 3, "payment_key": "ask-1"},
            wait=WaitMode.ASK,
            wait_deadline_s=1.5,
        )
    assert isinstance(step, TaskSettled) and step.status is TaskStatus.COMPLETED
    assert step.task.result["content"][0]["text"] == "approved ask-1"


async def test_fail_recoverable_keeps_the_handle(bridge: Bridge, wall_ledger: Ledger) -> None:
    run_ref = await _served_run(bridge, "failrec")
    step = await bridge.run(P, run_ref).call_tool(
        "tasks",
        "slow_report",
        {"quarter": "Q4", "seconds": 0.2},
        wait=WaitMode.FAIL_RECOVERABLE,
    )
    assert isinstance(step, RecoverableFailure)
    await wait_closed(wall_ledger.for_principal(P), step.task.ref)
    assert wall_ledger.for_principal(P).reads.get_task(step.task.ref).status is TaskStatus.COMPLETED


async def test_outer_cancel_leaves_inner_running_by_default(
    bridge: Bridge, wall_ledger: Ledger
) -> None:
    run_ref = await _served_run(bridge, "cancel-default")
    step = await bridge.run(P, run_ref).call_tool(
        "tasks", "slow_report", {"quarter": "Q1", "seconds": 0.6}, wait=WaitMode.DETACH
    )
    assert isinstance(step, TaskPending)
    await bridge.run(P, run_ref).record_status(OuterStatus.CANCELLED)
    tenant = wall_ledger.for_principal(P)
    await wait_closed(tenant, step.task.ref)
    assert tenant.reads.get_task(step.task.ref).status is TaskStatus.COMPLETED  # its real outcome
    assert tenant.reads.get_run(run_ref).status is OuterStatus.CANCELLED
    types = _types(wall_ledger, run_ref)
    assert "task.cancel_requested" not in types
    assert types.index("outer.terminal") < types.index("task.terminal")  # outer ended first
    _gapless(wall_ledger, run_ref)


async def test_outer_cancel_with_opt_in_sends_tasks_cancel(
    wall_ledger: Ledger, tasks_server: ServerProcess
) -> None:
    policies = Policies(on_outer_cancel=OnOuterCancel.CANCEL_INNER)
    async with _bridge(wall_ledger, tasks_server, policies=policies) as bridge:
        run_ref = await _served_run(bridge, "cancel-optin")
        step = await bridge.run(P, run_ref).call_tool(
            "tasks", "wait_forever", {}, wait=WaitMode.DETACH
        )
        assert isinstance(step, TaskPending)
        await bridge.run(P, run_ref).record_status(OuterStatus.CANCELLED)
        tenant = wall_ledger.for_principal(P)
        await wait_closed(tenant, step.task.ref)
    task = tenant.reads.get_task(step.task.ref)
    assert task.status is TaskStatus.CANCELLED  # the real final state, observed by a poll
    cancel = [e for e in tenant.reads.events(run_ref) if isinstance(e, ev.TaskCancelRequested)]
    assert [c.requested_by for c in cancel] == ["policy:outer_cancelled"]
    (open_tasks,) = [e for e in tenant.reads.events(run_ref) if isinstance(e, ev.OuterOpenTasks)]
    assert open_tasks.action == "cancel_requested" and open_tasks.task_refs == [step.task.ref]
    _gapless(wall_ledger, run_ref)


async def test_inner_terminal_before_outer_terminal(bridge: Bridge, wall_ledger: Ledger) -> None:
    run_ref = await _served_run(bridge, "inner-first")
    step = await bridge.run(P, run_ref).call_tool(
        "tasks", "slow_report", {"quarter": "Q3", "seconds": 0.1}
    )
    assert isinstance(step, TaskSettled)
    tenant = wall_ledger.for_principal(P)
    assert tenant.reads.get_run(run_ref).status is OuterStatus.IN_PROGRESS
    await bridge.run(P, run_ref).record_status(OuterStatus.COMPLETED)
    assert tenant.reads.get_run(run_ref).status is OuterStatus.COMPLETED
    assert tenant.reads.get_task(step.task.ref).status is TaskStatus.COMPLETED
    types = _types(wall_ledger, run_ref)
    assert types.index("task.terminal") < types.index("outer.terminal")


async def test_outer_end_report_policy_lists_and_releases_open_tasks(
    wall_ledger: Ledger, tasks_server: ServerProcess
) -> None:
    policies = Policies(on_outer_end=OnOuterEnd.REPORT)
    async with _bridge(wall_ledger, tasks_server, policies=policies) as bridge:
        run_ref = await _served_run(bridge, "end-report")
        step = await bridge.run(P, run_ref).call_tool(
            "tasks", "wait_forever", {}, wait=WaitMode.DETACH
        )
        assert isinstance(step, TaskPending)
        await bridge.run(P, run_ref).record_status(OuterStatus.COMPLETED)
        assert not bridge.is_watching(step.task.ref)
    tenant = wall_ledger.for_principal(P)
    (reported,) = [e for e in tenant.reads.events(run_ref) if isinstance(e, ev.OuterOpenTasks)]
    assert reported.action == "reported" and reported.task_refs == [step.task.ref]
    assert tenant.reads.get_task(step.task.ref).cancel_requested_at_ms is None  # not cancelled


async def test_subscriber_reconnecting_with_its_last_seq_misses_nothing(
    bridge: Bridge, wall_ledger: Ledger
) -> None:
    run_ref = await _served_run(bridge, "subscribe")
    seen: list[int] = []
    async for event in bridge.run(P, run_ref).subscribe():
        seen.append(event.seq)
        break
    step_done = anyio.Event()

    async def work() -> None:
        await bridge.run(P, run_ref).call_tool(
            "tasks", "slow_report", {"quarter": "Q1", "seconds": 0.1}
        )
        await bridge.run(P, run_ref).record_status(OuterStatus.COMPLETED)
        step_done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(work)
        async for event in bridge.run(P, run_ref).subscribe(after_seq=seen[-1]):
            seen.append(event.seq)
            if event.type == "outer.terminal":
                break
    assert seen == list(range(1, len(seen) + 1))  # no gap, no repeat across the reconnect
    await step_done.wait()


async def test_recovery_offers_unanswered_inputs_again_and_resumes_polling(
    tmp_path: Path, tasks_server: ServerProcess
) -> None:
    db = tmp_path / "ledger.db"
    async with Bridge.open(
        BridgeSettings(
            ledger_url=db, principals=[P], mcp_servers=_servers(tasks_server), scheduler=FAST
        )
    ) as first:
        run_ref = await _served_run(first, "recover")
        step = await first.run(P, run_ref).call_tool(
            "tasks",
            "approve_payment",
            {"amount": 9, "payment_key": "rec-1"},
            wait=WaitMode.DETACH,
        )
        assert isinstance(step, TaskPending)
        tenant = first._ledger.for_principal(P)
        (asked,) = await wait_until(lambda: tenant.reads.input_requests(step.task.ref))
    # A new process (here: a new bridge on the same ledger file) recovers.
    async with Bridge.open(
        BridgeSettings(
            ledger_url=db, principals=[P], mcp_servers=_servers(tasks_server), scheduler=FAST
        )
    ) as second:
        report = second.last_recovery
        assert report is not None and report.tasks_watched == 1
        assert [r.ref for r in report.pending_inputs] == [asked.ref]  # same input_ref
        assert report.served_runs_open == [run_ref]
        run = await second.run_of(P, step.task.ref)
        request = await run.pending_input(step.task.ref, asked.ref)
        assert (await request.accept({"approve": True})).delivered
        tenant = second._ledger.for_principal(P)
        await wait_closed(tenant, step.task.ref)
        assert tenant.reads.get_task(step.task.ref).status is TaskStatus.COMPLETED
        types = [e.type for e in tenant.reads.events(run_ref)]
        assert types.count("task.input_required") == 1  # surfaced once across the restart
        _gapless(second._ledger, run_ref)


@pytest.fixture(scope="module")
def uhp_server() -> Iterator[ServerProcess]:
    with ServerProcess("tests.servers.uhp_server") as server:
        yield server


async def _last_sequence(run: Run) -> bool:
    return ((await run.view()).last_sequence or 0) >= 5


async def test_remote_outer_run_is_reconciled_and_resumed_after_restart(
    tmp_path: Path, uhp_server: ServerProcess, tasks_server: ServerProcess
) -> None:
    db = tmp_path / "ledger.db"
    uhp = [UhpServerConfig("remote", f"http://127.0.0.1:{uhp_server.port}", "uhp-token")]
    tokens = {"uhp-token": "test-token"}
    options = {
        "principals": [P],
        "mcp_servers": _servers(tasks_server),
        "uhp_servers": uhp,
        "credentials": tokens.get,
        "scheduler": FAST,
    }
    async with Bridge.open(BridgeSettings(ledger_url=db, **options)) as first:
        run = await first.start_remote_run(
            P, "remote", "words=150 delay_ms=30", harness_id="chrn_test"
        )  # followed in the background
        run_ref = run.ref
        await wait_until(lambda: _last_sequence(run), timeout=30, what="five events")
    # this process went away mid-stream: where it stopped is what was recorded
    ledger = Ledger.open(db)
    try:
        stopped_at = ledger.for_principal(P).reads.get_run(run_ref).last_sequence
    finally:
        ledger.close()
    assert stopped_at is not None and stopped_at >= 5
    async with Bridge.open(BridgeSettings(ledger_url=db, **options)) as second:
        assert second.last_recovery is not None
        assert second.last_recovery.remote_runs_resumed == 1
        tenant = second._ledger.for_principal(P)
        await wait_until(lambda: tenant.reads.get_run(run_ref).status is OuterStatus.COMPLETED)
        resumed = [e for e in tenant.reads.events(run_ref) if isinstance(e, ev.OuterResumed)]
        assert resumed and resumed[0].after_sequence == stopped_at


@pytest.mark.postgres
async def test_bridge_on_postgresql_detach_subscribe_and_recover(
    wall_pg_ledger: Ledger, tasks_server: ServerProcess
) -> None:
    async with _bridge(wall_pg_ledger, tasks_server) as bridge:
        run_ref = await _served_run(bridge, "pg")
        arguments = {"quarter": "Q1", "seconds": 0.2}
        step = await bridge.run(P, run_ref).call_tool(
            "tasks", "slow_report", arguments, wait=WaitMode.DETACH
        )
        assert isinstance(step, TaskPending)
        async for event in bridge.run(P, run_ref).subscribe():  # woken from worker-thread commits
            if isinstance(event, ev.TaskTerminal):
                break
        await bridge.run(P, run_ref).record_status(OuterStatus.COMPLETED)
    tenant = wall_pg_ledger.for_principal(P)
    assert tenant.reads.get_task(step.task.ref).status is TaskStatus.COMPLETED
    _gapless(wall_pg_ledger, run_ref)
