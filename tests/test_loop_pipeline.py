"""Group-commit batches sent from the event loop (PostgreSQL;
``bridge/ledger/commit/loop_pipeline.py``).

A batch the loop's connection cannot commit is committed in a worker thread instead, and the
loop connects afresh for the next one; after a failed connect the loop is left alone for a
pause, during which batches go to worker threads as they did before the loop path existed. Real
PostgreSQL: the loop connection's backend is terminated, and a server of its own is stopped
outright and started again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest
from sqlalchemy import text

from bridge import Bridge
from bridge.gateway.event_loop import backend_options
from bridge.ledger.commit.driver_sessions import OneStatement
from bridge.ledger.commit.group_commit import StagedCommit
from bridge.ledger.commit.loop_pipeline import RECONNECT_PAUSE_S, LoopPipeline
from bridge.ledger.runner import LedgerRunner
from bridge.ledger.store import Ledger, TenantLedger
from bridge.lifecycle import DispatchState
from tests.support.builders import ENDPOINT, new_run
from tests.support.postgres import ThrowawayPostgres, fresh_database

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def _intent(tenant: TenantLedger, run_ref: str, n: int) -> StagedCommit[Any, Any, Any]:
    return tenant.stage_dispatch(
        run_ref, server_endpoint=ENDPOINT, tool_name="echo", arguments={"n": n}, sent=True
    )


def _statement(staged: StagedCommit[Any, Any, Any]) -> OneStatement[Any]:
    assert staged.statement is not None  # an intent is one statement
    return staged.statement


async def test_a_batch_whose_loop_connection_broke_commits_in_a_worker_thread(
    pg_ledger: Ledger,
) -> None:
    tenant = pg_ledger.for_principal("acme")
    run_ref = new_run(tenant).ref
    group, runner = pg_ledger.group_commit, LedgerRunner(inline=False)
    pipeline = pg_ledger._loop_pipeline
    assert pipeline is not None

    before = await runner.commit(group, _intent(tenant, run_ref, 1))
    assert (group.loop_transactions, pipeline.connects) == (1, 1)
    assert pipeline._connection is not None
    backend = pipeline._connection.info.backend_pid
    with pg_ledger.engine.connect() as admin:  # waits until the backend is gone
        ended = admin.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": backend})
        assert ended.scalar() is True

    lost = await runner.commit(group, _intent(tenant, run_ref, 2))
    assert (group.loop_transactions, group.loop_fallbacks) == (1, 1)
    after = await runner.commit(group, _intent(tenant, run_ref, 3))
    assert (group.loop_transactions, pipeline.connects) == (2, 2)  # connected afresh

    for view in (before, lost, after):
        assert tenant.get_dispatch(view.ref).state is DispatchState.SENT
    assert len(tenant.list_dispatches(run_ref=run_ref)) == 3


@pytest.fixture
def own_server() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server of this test's own, to stop outright."""
    server = ThrowawayPostgres(durable_commits=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_after_a_failed_connect_the_loop_is_left_alone_for_a_pause(
    own_server: ThrowawayPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    with fresh_database(own_server.url()) as url:
        ledger = Ledger.open(url)
        pipeline = LoopPipeline(ledger.engine, clock=lambda: now[0])
        try:
            tenant = ledger.for_principal("acme")
            run_ref = new_run(tenant).ref
            await pipeline.commit([_statement(_intent(tenant, run_ref, 1))])
            assert pipeline.connects == 1

            own_server.kill_server()
            with pytest.raises(psycopg.OperationalError):  # the connection broke
                await pipeline.commit([_statement(_intent(tenant, run_ref, 2))])
            assert pipeline.usable()  # a broken connection is no failed connect
            with pytest.raises(psycopg.OperationalError):  # no server to connect to
                await pipeline.commit([_statement(_intent(tenant, run_ref, 3))])
            assert not pipeline.usable()
            said = [r.getMessage() for r in caplog.records if r.name.endswith("loop_pipeline")]
            assert said == [
                "group commit: no connection from the event loop (OperationalError); batches "
                f"go to worker threads for {RECONNECT_PAUSE_S:g} s"
            ]

            own_server.start_server()
            now[0] += RECONNECT_PAUSE_S - 0.1
            assert not pipeline.usable()
            now[0] += 0.1
            assert pipeline.usable()
            await pipeline.commit([_statement(_intent(tenant, run_ref, 4))])
            assert pipeline.connects == 2
            # The first intent and the last: nothing of the two that failed.
            assert len(tenant.list_dispatches(run_ref=run_ref)) == 2
        finally:
            pipeline.close()
            ledger.close()


async def test_the_loop_path_is_not_taken_outside_a_running_asyncio_loop(
    pg_ledger: Ledger,
) -> None:
    pipeline = pg_ledger._loop_pipeline
    assert pipeline is not None and pipeline.usable()  # here: the test's asyncio loop
    assert not await anyio.to_thread.run_sync(pipeline.usable)  # a thread runs no loop


async def test_the_loop_path_runs_on_uvloop(pg_ledger: Ledger) -> None:
    """The gateway and the example harness serve on uvloop (bridge/gateway/event_loop.py)."""
    url = pg_ledger.engine.url.render_as_string(hide_password=False)

    async def commits() -> tuple[int, int]:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        ledger = Ledger.open(url, upgrade=False)
        try:
            tenant = ledger.for_principal("acme")
            run_ref = new_run(tenant).ref
            runner = LedgerRunner(inline=False)
            async with anyio.create_task_group() as tg:
                for n in range(8):
                    tg.start_soon(runner.commit, ledger.group_commit, _intent(tenant, run_ref, n))
            assert len(tenant.list_dispatches(run_ref=run_ref)) == 8
            return ledger.group_commit.loop_transactions, ledger.group_commit.loop_fallbacks
        finally:
            ledger.close()

    def on_uvloop() -> tuple[int, int]:
        return anyio.run(commits, backend_options=backend_options())

    assert backend_options() == {"use_uvloop": True}
    on_loop, fallbacks = await anyio.to_thread.run_sync(on_uvloop)
    assert on_loop >= 1 and fallbacks == 0


@pytest.mark.parametrize("commit_on_loop", [True, False])
async def test_bridge_open_says_whether_batches_go_from_the_loop(
    pg_ledger: Ledger, commit_on_loop: bool
) -> None:
    url = pg_ledger.engine.url.render_as_string(hide_password=False)
    async with Bridge.open(url, principals=["acme"], commit_on_loop=commit_on_loop) as bridge:
        tenant = bridge.ledger.for_principal("acme")
        group = bridge.ledger.group_commit
        view = await LedgerRunner(inline=False).commit(
            group, _intent(tenant, new_run(tenant).ref, 1)
        )
        assert tenant.get_dispatch(view.ref).state is DispatchState.SENT
        assert (group.transactions, group.loop_transactions) == (1, int(commit_on_loop))
