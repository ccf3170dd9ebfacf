"""Group commit of the call path's write-ahead commits (``bridge/_ledger/commit/group_commit.py``).

Concurrent callers' writes share transactions, each caller is released only once the
transaction holding its write committed (read back from a second connection at that moment),
and a failing write fails alone. Real SQLite files and a real PostgreSQL, writes in worker
threads (PostgreSQL's runner; SQLite runs its calls inline, where calls never overlap, but the
grouping itself is database-neutral and tested on both).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from bridge import Bridge, BridgeSettings
from bridge._errors import (
    DuplicateTaskHandle,
    InvalidTransition,
    LedgerUnavailable,
    NotFound,
    OperationReused,
)
from bridge._ledger.commit.commit_signals import CommitListener
from bridge._ledger.commit.driver_sessions import Cursor
from bridge._ledger.commit.group_commit import StagedCommit
from bridge._ledger.reads.views import CallView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import CallState, TaskStatus
from bridge.gateway._event_loop import backend_options
from tests.support.bridging import wait_until
from tests.support.builders import ENDPOINT, new_run

pytestmark = pytest.mark.anyio
RESULT = {"content": [{"type": "text", "text": "ok"}], "isError": False}


@pytest.fixture
def second(db_url: str, ledger: Ledger) -> Iterator[TenantLedger]:
    """The same database through a connection of its own: what another process would see."""
    other = Ledger.open(db_url, upgrade=False)
    try:
        yield other.for_principal("acme")
    finally:
        other.close()


def _intent(
    tenant: TenantLedger, run_ref: str, n: int, **extra: Any
) -> StagedCommit[Any, Any, Any]:
    return tenant.calls.stage_dispatch(
        run_ref,
        server_endpoint=ENDPOINT,
        server_name="reports",
        tool_name="echo",
        arguments={"n": n},
        sent=True,
        **extra,
    )


class Gate:
    """A write that holds its transaction open until released, so that others queue up
    behind it and are committed together as the next batch."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def staged(self) -> StagedCommit[Cursor, None, None]:
        def write(_cursor: Cursor) -> None:
            self.entered.set()
            assert self.release.wait(60), "gate never released"

        return StagedCommit(write, lambda _: None)


async def _commit_behind_gate(
    group: Any, batch: list[StagedCommit[Any, Any, Any]]
) -> dict[int, Any]:
    """Queue ``batch`` behind a held commit, so that it is committed as one batch: each
    write's value, or the exception it raised, by position."""
    runner = LedgerRunner(inline=False)
    outcomes: dict[int, Any] = {}

    async def caller(n: int, staged: StagedCommit[Any, Any, Any]) -> None:
        try:
            outcomes[n] = await runner.commit(group, staged)
        except Exception as exc:
            outcomes[n] = exc

    gate = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.commit, group, gate.staged())
        await anyio.to_thread.run_sync(gate.entered.wait, 30)
        for n, staged in enumerate(batch):
            tg.start_soon(caller, n, staged)
        await wait_until(lambda: group.queued == len(batch), what="the batch queued")
        gate.release.set()
    return outcomes


async def test_concurrent_dispatches_are_committed_before_each_caller_is_released(
    ledger: Ledger, second: TenantLedger
) -> None:
    await _concurrent_dispatches(ledger, second)
    # On PostgreSQL a batch of one-statement writes (intents, results) is sent in one round
    # trip, from a worker thread.
    pipelines = ledger.dialect.name == "postgresql"
    group = ledger.group_commit
    assert (group.pipelined_transactions >= 1) is pipelines


@pytest.mark.postgres
async def test_concurrent_writes_commit_on_uvloop(pg_ledger: Ledger) -> None:
    """The gateway and the example harness serve on uvloop (bridge/gateway/_event_loop.py):
    concurrent writes there are batched, pipelined from worker threads, and all committed."""
    url = pg_ledger.engine.url.render_as_string(hide_password=False)

    async def commits() -> tuple[int, int, int]:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        ledger = Ledger.open(url, upgrade=False)
        try:
            tenant = ledger.for_principal("acme")
            run_ref = new_run(tenant).ref
            runner = LedgerRunner(inline=False)
            async with anyio.create_task_group() as tg:
                for n in range(8):
                    tg.start_soon(runner.commit, ledger.group_commit, _intent(tenant, run_ref, n))
            assert len(tenant.reads.list_dispatches(run_ref=run_ref)) == 8
            group = ledger.group_commit
            return group.writes, group.pipelined_transactions, group.rolled_back
        finally:
            ledger.close()

    def on_uvloop() -> tuple[int, int, int]:
        return anyio.run(commits, backend_options=backend_options())

    assert backend_options() == {"use_uvloop": True}
    writes, pipelined, rolled_back = await anyio.to_thread.run_sync(on_uvloop)
    # The first write commits alone; the seven queued behind it go in one pipelined batch.
    assert (writes, rolled_back) == (8, 0) and pipelined >= 1


@pytest.mark.postgres
async def test_a_bridge_on_postgresql_commits_through_its_ledgers_group_commit(
    pg_ledger: Ledger,
) -> None:
    url = pg_ledger.engine.url.render_as_string(hide_password=False)
    async with Bridge.open(BridgeSettings(ledger_url=url, principals=["acme"])) as bridge:
        tenant = bridge._ledger.for_principal("acme")
        group = bridge._ledger.group_commit
        view = await LedgerRunner(inline=False).commit(
            group, _intent(tenant, new_run(tenant).ref, 1)
        )
        assert tenant.reads.get_dispatch(view.ref).state is CallState.SENT
        assert group.transactions == 1


async def _concurrent_dispatches(ledger: Ledger, second: TenantLedger) -> None:
    """32 callers, each an intent then its result, queued behind a held commit."""
    tenant = ledger.for_principal("acme")
    runs = [new_run(tenant).ref for _ in range(4)]
    runner = LedgerRunner(inline=False)
    group = ledger.group_commit
    seen: dict[int, tuple[CallState, CallState]] = {}

    async def caller(n: int) -> None:
        run_ref = runs[n % len(runs)]
        intent = await runner.commit(group, _intent(tenant, run_ref, n))
        on_release = second.reads.get_dispatch(intent.ref).state  # read by another connection
        settled = await runner.commit(
            group, tenant.calls.stage_immediate_result(RESULT, intent=intent)
        )
        assert settled.state is CallState.RESULT and settled.result == RESULT
        seen[n] = (on_release, second.reads.get_dispatch(intent.ref).state)

    gate = Gate()
    callers = 32
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.commit, group, gate.staged())
        await anyio.to_thread.run_sync(gate.entered.wait, 30)
        for n in range(callers):
            tg.start_soon(caller, n)
        await wait_until(lambda: group.queued == callers, what="every intent queued")
        gate.release.set()

    assert seen == {n: (CallState.SENT, CallState.RESULT) for n in range(callers)}
    assert group.writes == 1 + 2 * callers  # the gate, the intents, the results
    # The intents queued behind the gate shared one commit.
    assert group.transactions <= 1 + 1 + callers
    assert group.pipelined_transactions <= group.transactions
    for run_ref in runs:  # every result's event, gapless per run
        events = second.reads.events(run_ref)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert sum(e.type == "call.result" for e in events) == callers // len(runs)


async def test_a_failing_write_in_a_batch_fails_alone(ledger: Ledger, second: TenantLedger) -> None:
    tenant = ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    group = ledger.group_commit
    first = tenant.calls.begin_dispatch(
        run_ref,
        server_endpoint=ENDPOINT,
        tool_name="echo",
        arguments={"n": -1},
        operation_id="op-1",
        sent=True,
    )
    tenant.calls.record_immediate_result(first.ref, RESULT, intent=first)  # settled: moves no more
    good = [_intent(tenant, run_ref, n) for n in range(6)]
    failing = [
        _intent(tenant, "run_missing", 100),  # NotFound: no such run
        _intent(tenant, run_ref, 101, operation_id="op-1"),  # the id used for another call
        tenant.calls.stage_immediate_result(RESULT, intent=first),  # InvalidTransition
    ]
    replayed = _intent(tenant, run_ref, -1, operation_id="op-1")  # the same call again
    outcomes = await _commit_behind_gate(group, [*good[:3], *failing, replayed, *good[3:]])

    assert isinstance(outcomes[3], NotFound)
    assert isinstance(outcomes[4], OperationReused)
    assert isinstance(outcomes[5], InvalidTransition)
    assert isinstance(outcomes[6], CallView) and outcomes[6].ref == first.ref
    written = [outcomes[n] for n in (0, 1, 2, 7, 8, 9)]
    for view in written:
        assert isinstance(view, CallView)
        assert second.reads.get_dispatch(view.ref).state is CallState.SENT
    assert second.reads.get_dispatch(first.ref).result == RESULT
    assert len(second.reads.list_dispatches(run_ref=run_ref)) == 1 + len(good)
    # The pipelined attempt (PostgreSQL) was rolled back whole: every
    # write went alone.
    assert group.pipelined_transactions == 0
    assert group.pipelined_rolled_back == (1 if ledger.dialect.name == "postgresql" else 0)


async def test_a_refused_check_rolls_a_pipelined_batch_back_and_only_it_fails(
    ledger: Ledger, second: TenantLedger
) -> None:
    """Every statement of the batch succeeds on the server, but one write's check refuses
    what its statement returned (a result for a call already settled: the guarded move
    touched no row): the batch is rolled back, then committed one write per transaction."""
    tenant = ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    group = ledger.group_commit
    settled = tenant.calls.begin_dispatch(
        run_ref, server_endpoint=ENDPOINT, tool_name="echo", arguments={}, sent=True
    )
    tenant.calls.record_immediate_result(settled.ref, RESULT, intent=settled)
    events_before = len(second.reads.events(run_ref))
    batch = [
        _intent(tenant, run_ref, 1),
        tenant.calls.stage_immediate_result(RESULT, intent=settled),  # refused by its check
        _intent(tenant, run_ref, 2),
    ]
    outcomes = await _commit_behind_gate(group, batch)

    assert isinstance(outcomes[1], InvalidTransition)
    for n in (0, 2):
        assert second.reads.get_dispatch(outcomes[n].ref).state is CallState.SENT
    assert len(second.reads.events(run_ref)) == events_before  # the refused result logged nothing
    assert group.pipelined_transactions == 0
    assert group.pipelined_rolled_back == (1 if ledger.dialect.name == "postgresql" else 0)
    # gate, then the two intents alone after the roll-back
    assert (group.transactions, group.writes) == (3, 3)


async def test_a_refused_database_fails_the_pending_writes_at_once(
    ledger: Ledger, second: TenantLedger
) -> None:
    """A batch meets a database that takes no writes (``LedgerUnavailable``, as a full disk or
    a lost server raise it; here one write raises it, standing in for such a database): every
    write of the batch fails with it at once, none is tried again alone (each would meet the
    same refusal), and nothing of the batch is stored."""
    tenant = ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    group = ledger.group_commit

    def refused(_cursor: Cursor) -> None:
        raise LedgerUnavailable("no space left on device")

    batch = [
        _intent(tenant, run_ref, 1),
        StagedCommit(refused, lambda _: None),
        _intent(tenant, run_ref, 2),
    ]
    outcomes = await _commit_behind_gate(group, batch)

    assert [type(outcomes[n]) for n in range(3)] == [LedgerUnavailable] * 3
    assert (group.retried_alone, group.rolled_back) == (0, 0)
    assert second.reads.list_dispatches(run_ref=run_ref) == []
    assert (group.transactions, group.writes) == (1, 1)  # the gate's, alone


async def test_a_lone_caller_commits_at_once_in_a_transaction_of_its_own(
    ledger: Ledger, second: TenantLedger
) -> None:
    tenant = ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    runner = LedgerRunner(inline=False)
    group = ledger.group_commit
    for n in range(3):
        intent = await runner.commit(group, _intent(tenant, run_ref, n))
        assert second.reads.get_dispatch(intent.ref).state is CallState.SENT
    assert (group.transactions, group.writes, group.queued) == (3, 3, 0)


async def test_a_caller_cancelled_while_queued_still_learns_its_write_was_committed(
    ledger: Ledger, second: TenantLedger
) -> None:
    tenant = ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    runner = LedgerRunner(inline=False)
    group = ledger.group_commit
    gate = Gate()
    committed: list[CallView] = []

    async def caller(scope: anyio.CancelScope) -> None:
        with scope:
            committed.append(await runner.commit(group, _intent(tenant, run_ref, 1)))

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.commit, group, gate.staged())
        await anyio.to_thread.run_sync(gate.entered.wait, 30)
        tg.start_soon(caller, scope)
        await wait_until(lambda: group.queued == 1, what="the intent queued")
        scope.cancel()  # the write was handed over: it is seen through, then cancelled
        gate.release.set()

    assert len(committed) == 1
    assert second.reads.get_dispatch(committed[0].ref).state is CallState.SENT


async def test_an_inline_runner_commits_alone_instead_of_grouping(
    ledger: Ledger, second: TenantLedger
) -> None:
    """Inline calls never overlap: the write is committed alone, at once, the group untouched
    (it used to be refused: callers chose the ungrouped write themselves)."""
    tenant = ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    group = ledger.group_commit
    before = (group.batches, group.transactions, group.writes)
    view = await LedgerRunner(inline=True).commit(group, _intent(tenant, run_ref, 1))
    assert (group.batches, group.transactions, group.writes) == before
    assert second.reads.get_dispatch(view.ref).state is CallState.SENT
    # The refusals of the write itself come through this route as they do through the group.
    with pytest.raises(NotFound):
        await LedgerRunner(inline=True).commit(group, _intent(tenant, "run_missing", 2))


async def test_task_handles_share_commits_and_a_duplicate_handle_fails_alone(
    ledger: Ledger, second: TenantLedger
) -> None:
    tenant = ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    group = ledger.group_commit
    intents = [tenant.calls.begin_dispatch(**_intent_fields(run_ref, n)) for n in range(5)]
    staged = [
        tenant.calls.stage_task_created(
            op.ref, task_id=f"task-{min(n, 3)}", status=TaskStatus.WORKING, poll_interval_ms=500
        )
        for n, op in enumerate(intents)  # the last one reuses task-3: a duplicate handle
    ]
    outcomes = await _commit_behind_gate(group, staged)

    created = [outcomes[n] for n in range(4)]
    assert [second.reads.get_task(task.ref).op_ref for task in created] == [
        i.ref for i in intents[:4]
    ]
    assert isinstance(outcomes[4], DuplicateTaskHandle)
    assert second.reads.get_dispatch(intents[4].ref).state is CallState.SENT  # nothing of it
    kinds = [(e.type, getattr(e, "kind", None)) for e in second.reads.events(run_ref)]
    assert kinds.count(("task.created", None)) == 4
    assert kinds.count(("anomaly", "duplicate_task_handle")) == 1


@pytest.mark.postgres
async def test_a_postgresql_call_path_commit_is_announced_once_from_its_transaction(
    pg_ledger: Ledger,
) -> None:
    """Other processes hear a grouped commit by the NOTIFY inside its transaction (delivered
    at commit), not by a publisher's transaction after it: once per commit, not twice."""
    tenant = pg_ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    heard: list[tuple[str | None, int]] = []
    listener = CommitListener(pg_ledger.engine, lambda ref, seq: heard.append((ref, seq)))
    listener.start()
    try:
        assert await anyio.to_thread.run_sync(listener.listening.wait, 30)
        runner = LedgerRunner(inline=False)
        ops = [tenant.calls.begin_dispatch(**_intent_fields(run_ref, n)) for n in range(2)]
        task = await runner.commit(
            pg_ledger.group_commit,
            tenant.calls.stage_task_created(ops[0].ref, task_id="t-0", status=TaskStatus.WORKING),
        )
        settled = await runner.commit(
            pg_ledger.group_commit, tenant.calls.stage_immediate_result(RESULT, intent=ops[1])
        )
        assert task.run_ref == settled.run_ref == run_ref
        last = tenant.reads.get_run(run_ref).event_count
        await wait_until(lambda: (run_ref, last) in heard, what="both commits heard")
        assert heard == [(run_ref, last - 1), (run_ref, last)]
    finally:
        await anyio.to_thread.run_sync(listener.stop)


def _intent_fields(run_ref: str, n: int) -> dict[str, Any]:
    return {
        "run_ref": run_ref,
        "server_endpoint": ENDPOINT,
        "tool_name": "echo",
        "arguments": {"n": n},
        "sent": True,
    }


async def test_another_event_loop_on_the_same_ledger_commits_alone(
    ledger: Ledger, second: TenantLedger
) -> None:
    tenant = ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    group = ledger.group_commit
    await LedgerRunner(inline=False).commit(group, _intent(tenant, run_ref, 1))  # batches here

    def on_another_loop() -> CallView:
        staged = _intent(tenant, run_ref, 2)
        return anyio.run(LedgerRunner(inline=False).commit, group, staged)

    view = await anyio.to_thread.run_sync(on_another_loop)
    assert second.reads.get_dispatch(view.ref).state is CallState.SENT
    assert (group.transactions, group.writes, group.queued) == (2, 2, 0)
