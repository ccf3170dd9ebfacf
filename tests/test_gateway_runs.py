"""When a run the gateway made ends, and the status lines operators read.

The gateway runs as a real subprocess in front of the real fastmcp-tasks example servers
(reports, payments); clients are the official MCP SDK client with the Tasks extension and
without it. Runs are read back from the gateway's own SQLite ledger and through ``bridge
show --json``. The derived status lines are also checked on a real ledger file directly:
they change with the facts, with no status column written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from bridge import BridgeSettings, events as ev
from bridge._facade import Bridge
from bridge._ledger.reader import LedgerReader
from bridge._ledger.reads.call_states import Standing, calls_of, ending_of
from bridge._ledger.reads.views import RunView, TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import LostReason, OuterStatus, TaskStatus
from bridge._mcp.wire.shapes import CancelTaskRequest, TaskIdParams
from bridge.cli._records import load_snapshot
from bridge.gateway._runs import GatewayRuns
from tests.support.builders import new_run, new_task
from tests.support.gateway import (
    ALICE,
    APPROVE,
    DEADLINE_S,
    POLL_S,
    Gateway,
    dispatches,
    payment,
    poll_until,
)
from tests.support.mcp_client import connect, start_task, update_task
from tests.support.processes import REPO_ROOT

QUICK_REPORT = {"quarter": "2026-Q1", "sections": 1, "seconds_per_section": 0.1}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def run_of(db: Path, run_ref: str) -> RunView:
    ledger = Ledger.open(db)
    try:
        return ledger.for_principal("alice").reads.get_run(run_ref)
    finally:
        ledger.close()


def run_events(db: Path, run_ref: str) -> list[ev.BridgeEvent]:
    ledger = Ledger.open(db)
    try:
        return ledger.for_principal("alice").reads.events(run_ref)
    finally:
        ledger.close()


async def until_run(db: Path, run_ref: str, status: OuterStatus) -> RunView:
    with anyio.fail_after(DEADLINE_S):
        while (run := run_of(db, run_ref)).status is not status:
            assert not run.is_terminal, run  # ended otherwise
            await anyio.sleep(POLL_S)
    return run


def only_run(db: Path) -> str:
    (recorded,) = dispatches(db, "alice")
    return recorded.run_ref


def show(gw: Gateway, run_ref: str) -> dict[str, Any]:
    """``bridge show --json``: what an operator reads."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bridge.cli", "--db", str(gw.db), "--principal", "alice"),
            *("show", run_ref, "--json"),
        ],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        check=True,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


# -- the gateway's runs end with their calls ---------------------------------------------------
@pytest.mark.anyio
async def test_a_task_backed_call_ends_its_run_and_a_later_call_opens_the_next(
    gateway: Gateway,
) -> None:
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        created = await start_task(client, "reports__generate_report", QUICK_REPORT)
        await poll_until(client, created.task_id, {"completed"})
    first = only_run(gateway.db)
    ended = await until_run(gateway.db, first, OuterStatus.COMPLETED)
    assert ended.response_id == "gateway:default" and ended.error is None
    terminal = [e for e in run_events(gateway.db, first) if isinstance(e, ev.OuterTerminal)]
    assert [e.status for e in terminal] == [OuterStatus.COMPLETED]
    assert show(gateway, first)["run"]["status_line"] == "completed · 1 call: 1 completed"

    # The same identity (the default session) again: the next run, not the ended one.
    async with connect(gateway.proc.url, ALICE, tasks=False) as client:
        with anyio.fail_after(DEADLINE_S):
            await client.session.call_tool("reports__generate_report", QUICK_REPORT)
    (second,) = {d.run_ref for d in dispatches(gateway.db, "alice")} - {first}
    assert (await until_run(gateway.db, second, OuterStatus.COMPLETED)).response_id == (
        "gateway:default#2"
    )
    assert run_of(gateway.db, first).status is OuterStatus.COMPLETED  # never reopened


@pytest.mark.anyio
async def test_a_call_waiting_on_input_keeps_its_run_open(gateway: Gateway) -> None:
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        created = await start_task(client, "payments__approve_payment", payment("pay-runs-1"))
        asking = await poll_until(client, created.task_id, {"input_required"})
        run_ref = only_run(gateway.db)
        shown = show(gateway, run_ref)
        assert shown["run"]["status"] == "in_progress"
        assert shown["run"]["status_line"] == "in_progress · 1 call: 1 waiting on input"
        (task,) = shown["calls"][0]["tasks"]
        assert task["status_line"].startswith("input_required · waiting on in_")
        assert run_of(gateway.db, run_ref).status is OuterStatus.IN_PROGRESS

        assert asking.input_requests is not None
        (key,) = asking.input_requests
        await update_task(client, created.task_id, {key: APPROVE})
        await poll_until(client, created.task_id, {"completed"})
    await until_run(gateway.db, run_ref, OuterStatus.COMPLETED)


@pytest.mark.anyio
async def test_a_failed_call_ends_its_run_failed(gateway: Gateway) -> None:
    async with connect(gateway.proc.url, ALICE, tasks=False) as client:
        with anyio.fail_after(DEADLINE_S):
            refused = await client.session.call_tool(
                "reports__generate_report", {**QUICK_REPORT, "sections": 10_000}
            )
    assert isinstance(refused, mcp_types.CallToolResult) and refused.is_error
    run = await until_run(gateway.db, only_run(gateway.db), OuterStatus.FAILED)
    assert run.error == {
        "code": "calls_ended",
        "message": "some calls failed",
        "calls": {"failed": 1},
    }


@pytest.mark.anyio
async def test_a_cancelled_task_ends_its_run_cancelled(gateway: Gateway) -> None:
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        created = await start_task(client, "payments__approve_payment", payment("pay-runs-2"))
        await poll_until(client, created.task_id, {"input_required"})
        cancel = CancelTaskRequest(params=TaskIdParams(task_id=created.task_id))
        await client.session.send_request(cancel, mcp_types.Result)  # through the gateway
        await poll_until(client, created.task_id, {"cancelled"})
    await until_run(gateway.db, only_run(gateway.db), OuterStatus.CANCELLED)


@pytest.mark.anyio
async def test_concurrent_calls_end_the_run_only_after_the_last(gateway: Gateway) -> None:
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        waiting = await start_task(client, "payments__approve_payment", payment("pay-runs-4"))
        quick = await start_task(client, "reports__generate_report", QUICK_REPORT)
        (run_ref,) = {d.run_ref for d in dispatches(gateway.db, "alice")}  # one run for both
        asking = await poll_until(client, waiting.task_id, {"input_required"})
        await poll_until(client, quick.task_id, {"completed"})
        shown = show(gateway, run_ref)
        assert shown["run"]["status_line"] == (
            "in_progress · 2 calls: 1 waiting on input, 1 completed"
        )
        # The line changed with the report's end; the run's row was not written.
        before = run_of(gateway.db, run_ref)
        assert (before.status, before.error, before.updated_at_ms) == (
            OuterStatus.IN_PROGRESS,
            None,
            before.created_at_ms,
        )
        assert asking.input_requests is not None
        (key,) = asking.input_requests
        await update_task(client, waiting.task_id, {key: APPROVE})
        await poll_until(client, waiting.task_id, {"completed"})
    await until_run(gateway.db, run_ref, OuterStatus.COMPLETED)
    assert show(gateway, run_ref)["run"]["status_line"] == "completed · 2 calls: 2 completed"


@pytest.mark.anyio
async def test_a_run_left_open_by_a_killed_gateway_ends_after_the_restart(
    gateway: Gateway,
) -> None:
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        created = await start_task(client, "payments__approve_payment", payment("pay-runs-3"))
        asking = await poll_until(client, created.task_id, {"input_required"})
    run_ref = only_run(gateway.db)
    gateway.proc.restart()  # SIGKILL while the call waits on input
    assert run_of(gateway.db, run_ref).status is OuterStatus.IN_PROGRESS
    async with connect(gateway.proc.url, ALICE, tasks=True) as client:
        assert asking.input_requests is not None
        (key,) = asking.input_requests
        await update_task(client, created.task_id, {key: APPROVE})
        await poll_until(client, created.task_id, {"completed"})
    await until_run(gateway.db, run_ref, OuterStatus.COMPLETED)


# -- the ending rule and the status lines, on a real ledger -----------------------------------
def test_an_unknown_or_lost_call_ends_incomplete_never_completed(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db")
    try:
        tenant = ledger.for_principal("alice")
        run = new_run(tenant)
        done = new_task(tenant, run.ref)
        tenant.tasks.observe_task(
            done.ref, TaskObservation(status=TaskStatus.COMPLETED, result={"content": []})
        )
        lost = new_task(tenant, run.ref)

        def ending() -> Any:
            tasks, recorded, _ = tenant.reads.run_work(run.ref)
            return ending_of(calls_of(recorded, tasks))

        assert ending() is None  # one still working
        tenant.tasks.mark_task_lost(lost.ref, LostReason.TTL_EXPIRED, "createdAt + ttlMs passed")
        result = ending()
        assert result.status is OuterStatus.INCOMPLETE
        assert result.error["unresolved"] == [lost.ref]
        assert result.error["calls"] == {"completed": 1, "unresolved": 1}
        snapshot = load_snapshot(LedgerReader(ledger, tenant.principal), run.ref)
        assert [c.state for c in snapshot.calls] == [Standing.COMPLETED, Standing.UNRESOLVED]
    finally:
        ledger.close()


def test_status_lines_change_with_the_facts_and_no_status_column_is_written(
    tmp_path: Path,
) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db")
    try:
        tenant = ledger.for_principal("alice")
        run = new_run(tenant)
        task = new_task(tenant, run.ref, ttl_ms=60_000)
        request = {"method": "elicitation/create", "params": {"message": "Approve?"}}
        tenant.tasks.observe_task(
            task.ref,
            TaskObservation(
                status=TaskStatus.INPUT_REQUIRED,
                status_message="waiting for approval",
                input_requests={"approve-1": request},
            ),
        )

        def columns() -> tuple[Any, ...]:
            t, r = tenant.reads.get_task(task.ref), tenant.reads.get_run(run.ref)
            return (t.status, t.status_message, t.lost_reason, r.status, r.error)

        def line(now: int | None = None) -> str:
            shown = load_snapshot(LedgerReader(ledger, "alice"), run.ref, now=now).record()
            status_line: str = shown["calls"][0]["tasks"][0]["status_line"]
            return status_line

        recorded = columns()
        asking = line()
        assert asking.startswith("input_required · waiting on in_")
        assert asking.endswith("server: 'waiting for approval'")
        (pending,) = tenant.reads.input_requests(task.ref, pending_only=True)
        tenant.inputs.record_input_answer(task.ref, pending.ref, APPROVE)  # a fact, not a status
        answered = line()
        assert f"{pending.ref} answered at" in answered and "not delivered yet" in answered
        late = line(now=task.created_at_ms + 60_001)  # the clock is a fact too
        assert "TTL passed: not terminal yet" in late and "TTL" not in answered
        assert columns() == recorded  # no status column (nor the message) was written

        # A new status without a message leaves none, not the previous status's text.
        tenant.tasks.observe_task(task.ref, TaskObservation(status=TaskStatus.WORKING))
        assert tenant.reads.get_task(task.ref).status_message is None
        assert line() == "working"
    finally:
        ledger.close()


def test_the_newest_run_of_an_identity_is_found_on_both_engines(ledger: Ledger) -> None:
    """``#10`` is newer than ``#9``; another identity sharing a prefix, another case or
    another principal's run never counts."""
    tenant = ledger.for_principal("alice")
    for response_id in ("gateway:s1", "gateway:s1#2", "gateway:s1#9", "gateway:s1#10"):
        tenant.runs.open_run("local:gateway", response_id=response_id)
    tenant.runs.open_run("local:gateway", response_id="gateway:s10#99")
    tenant.runs.open_run("local:gateway", response_id="gateway:S1#11")
    ledger.for_principal("bob").runs.open_run("local:gateway", response_id="gateway:s1#12")
    newest = tenant.reads.latest_run_of("local:gateway", "gateway:s1", "#")
    assert newest is not None and newest.response_id == "gateway:s1#10"
    assert tenant.reads.latest_run_of("local:gateway", "gateway:s2", "#") is None
    assert tenant.reads.latest_run_of("local:harness", "gateway:s1", "#") is None


@pytest.mark.anyio
async def test_a_held_run_is_not_ended_and_its_identity_moves_on_once_it_is(
    tmp_path: Path,
) -> None:
    """A request inside a run holds it open, even with every call ended (here: none was
    recorded, which ends it ``failed``); the next request under the identity opens ``#2``."""
    async with Bridge.open(
        BridgeSettings(ledger_url=tmp_path / "ledger.db", principals=("alice",))
    ) as bridge:
        runs = GatewayRuns(bridge)
        async with runs.joined("alice", "s1", None, None) as first:
            assert not await runs.ends.settle("alice", first)
            async with runs.joined("alice", "s1", None, None) as same:
                assert same == first
            assert (await bridge.run("alice", first).view()).status is OuterStatus.IN_PROGRESS
        ended = await bridge.run("alice", first).view()
        assert ended.status is OuterStatus.FAILED
        assert ended.error["message"] == "no call was recorded in this run"
        async with runs.joined("alice", "s1", None, None) as second:
            assert second != first
        assert (await bridge.run("alice", second).view()).response_id == "gateway:s1#2"
