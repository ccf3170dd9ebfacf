"""Bridges as replicas on one PostgreSQL ledger, in one process (each with its own ledger
connection pool, as separate processes would have): a subscriber on one replica follows events
another replica writes, and a replica whose membership lapses hands its handles and its
followed remote run to another, which finishes them. The SIGKILL case across processes is in
``test_scale_out.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from bench.scale_out import PRINCIPAL as SEEDED_PRINCIPAL, seed_open_tasks
from bridge import (
    Bridge,
    BridgeSettings,
    McpServerConfig,
    OuterStatus,
    TaskStatus,
    UhpServerConfig,
    WaitMode,
    events as ev,
)
from bridge._config import ReplicaConfig
from bridge._ledger.coordination.leases import ReplicaRegistry, TenantLeases
from bridge._ledger.store import TASKS, Ledger
from tests.support.bridging import FAST, wait_until
from tests.support.postgres import ThrowawayPostgres, fresh_database
from tests.support.processes import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.e2e]  # replicas, outages
P = "acme"
UNREACHABLE_MCP = "http://127.0.0.1:9/mcp"  # nothing listens there: polls fail, handles stay


@pytest.fixture
def pg_url(postgres_admin_url: str) -> Iterator[str]:
    with fresh_database(postgres_admin_url) as url:
        Ledger.open(url).close()
        yield url


@pytest.fixture(scope="module")
def uhp_server() -> Iterator[ServerProcess]:
    with ServerProcess("tests.servers.uhp_server") as server:
        yield server


def _replica(url: str, name: str, tasks_server: ServerProcess, **options: Any) -> Bridge:
    config = ReplicaConfig(name, lease_ms=1_500, claim_every_ms=100)
    return Bridge(
        Ledger.open(url),
        BridgeSettings(
            principals=[P],
            mcp_servers=[McpServerConfig(name="tasks", url=tasks_server.url)],
            scheduler=FAST,
            replica=config,
            **options,
        ),
        owns_ledger=True,
    )


async def test_a_subscriber_on_another_replica_sees_every_event_in_order(
    pg_url: str, tasks_server: ServerProcess
) -> None:
    async with (
        _replica(pg_url, "replica-a", tasks_server) as a,
        _replica(pg_url, "replica-b", tasks_server) as b,
    ):
        run = await a.register_served_run(
            P, response_id="resp_x", session_id="hsess_x", harness_id="h"
        )
        step = await run.call_tool("tasks", "slow_report", {"quarter": "Q1", "seconds": 0.5},
            wait=WaitMode.DETACH,
        )  # fmt: skip
        assert a.is_watching(step.task.ref), "the creating replica holds it"
        assert not b.is_watching(step.task.ref)
        seen = []
        async for event in b.run(P, run.ref).subscribe():  # B's ledger never hears A's commits
            seen.append(event)
            if isinstance(event, ev.TaskTerminal):
                break
    written = Ledger.open(pg_url).for_principal(P).reads.events(run.ref)
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert [e.model_dump() for e in seen] == [e.model_dump() for e in written[: len(seen)]]


async def test_a_lapsed_replica_hands_its_task_and_remote_run_over(
    pg_url: str, tasks_server: ServerProcess, uhp_server: ServerProcess
) -> None:
    uhp = [UhpServerConfig("remote", f"http://127.0.0.1:{uhp_server.port}", "uhp-token")]
    options = {"uhp_servers": uhp, "credentials": {"uhp-token": "test-token"}.get}
    async with (
        _replica(pg_url, "replica-a", tasks_server, **options) as a,
        _replica(pg_url, "replica-b", tasks_server, **options) as b,
    ):
        run = await a.register_served_run(
            P, response_id="resp_y", session_id="hsess_y", harness_id="h"
        )
        step = await run.call_tool("tasks", "slow_report", {"quarter": "Q2", "seconds": 3},
            wait=WaitMode.DETACH,
        )  # fmt: skip
        follower = await a.start_remote_run(
            P, "remote", "words=80 delay_ms=40", harness_id="chrn_test"
        )  # followed in the background
        tenant = b._ledger.for_principal(P)
        leases = TenantLeases(tenant)
        await wait_until(lambda: tenant.reads.get_run(follower.ref).last_sequence, what="streaming")
        assert a._replica is not None and b._replica is not None
        lapsed = a._replica.current()
        assert leases.holder("task", step.task.ref) == lapsed
        assert leases.holder("run", follower.ref) == lapsed

        ReplicaRegistry(b._ledger).renew(lapsed, 0)  # A's membership lapses (a long pause)

        def taken_over() -> bool:
            # B claims at once; A's next renewal fails and it comes back as a new incarnation
            # that competes for claims too. Either way the lapsed incarnation holds nothing.
            assert a._replica is not None and b._replica is not None
            live = {a._replica.current(), b._replica.current()} - {lapsed}
            return (
                leases.holder("task", step.task.ref) in live
                and leases.holder("run", follower.ref) in live
            )

        await wait_until(taken_over, what="live replicas hold both")
        await wait_until(lambda: a._replica.current() != lapsed, what="A re-registered")
        # A counted the handle it lost: dropped when it found its membership lapsed, or refused
        # at its write if it polled first (the scale-out test excuses early polls by these).
        lost = a._requester.scheduler.stats
        assert lost.dropped_on_lapse + lost.leases_lost >= 1
        await wait_until(
            lambda: tenant.reads.get_run(follower.ref).status is OuterStatus.COMPLETED,
            what="the remote run finished",
        )
        await wait_until(lambda: not tenant.reads.get_task(step.task.ref).is_open, timeout=20)
    task = tenant.reads.get_task(step.task.ref)
    assert task.status is TaskStatus.COMPLETED
    events = tenant.reads.events(follower.ref)
    assert any(isinstance(e, ev.OuterResumed) for e in events), "B resumed the stream"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    terminals = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskTerminal)]
    assert len(terminals) == 1


async def test_in_flight_calls_of_a_dead_replica_become_unknown(
    pg_url: str, tasks_server: ServerProcess
) -> None:
    ledger = Ledger.open(pg_url)
    tenant = ledger.for_principal(P)
    registry = ReplicaRegistry(ledger)
    run = tenant.runs.open_run("local:h", response_id="resp_z", status=OuterStatus.IN_PROGRESS)
    live = registry.register("replica-live", 60_000)
    dead = registry.register("replica-dead", 60_000)

    def in_flight(member: Any, n: int) -> str:
        return tenant.calls.begin_dispatch(
            run.ref, server_endpoint=tasks_server.url, server_name="tasks",
            tool_name="slow_report", arguments={"n": n}, sent=True, dispatcher=member,
        ).ref  # fmt: skip

    theirs, ours = in_flight(dead, 1), in_flight(live, 2)
    registry.renew(dead, 0)  # replica-dead stopped renewing: its incarnation is gone
    async with _replica(pg_url, "replica-c", tasks_server) as c:
        assert c.last_recovery is not None
        assert c.last_recovery.calls_marked_unknown == 1
    assert tenant.reads.get_dispatch(theirs).state.value == "unknown"
    assert tenant.reads.get_dispatch(ours).state.value == "sent", (
        "a live replica's call is left alone"
    )
    unknown = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.CallUnknownOutcome)]
    assert [e.op_ref for e in unknown] == [theirs]
    ledger.close()


async def test_a_replica_rides_out_a_database_outage(tasks_server: ServerProcess) -> None:
    """PostgreSQL stops abruptly under a replica holding a task: the replica stops acting on
    its lease once it cannot renew it, keeps running, and after the restart renews (or
    re-registers and claims the task back) and records the task's outcome exactly once."""
    database = ThrowawayPostgres(durable_commits=True)
    database.start()
    try:
        with fresh_database(database.url()) as url:
            Ledger.open(url).close()
            async with _replica(url, "replica-a", tasks_server) as a:
                assert a._replica is not None
                run = await a.register_served_run(
                    P, response_id="resp_o", session_id="hsess_o", harness_id="h"
                )
                step = await run.call_tool("tasks", "slow_report", {"quarter": "Q4", "seconds": 2},
                    wait=WaitMode.DETACH,
                )  # fmt: skip
                database.kill_server()
                await wait_until(lambda: not a._replica.can_act(), what="stopped acting")
                database.start_server()
                await wait_until(a._replica.can_act, timeout=30, what="acting again")
                tenant = a._ledger.for_principal(P)
                await wait_until(
                    lambda: not tenant.reads.get_task(step.task.ref).is_open, timeout=30
                )
                assert tenant.reads.get_task(step.task.ref).status is TaskStatus.COMPLETED
                terminals = [
                    e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskTerminal)
                ]
                assert len(terminals) == 1
    finally:
        database.stop()


def _seeded_replica(pg_url: str, config: ReplicaConfig) -> Bridge:
    """A replica of the seeded principal whose MCP server is unreachable (claims only)."""
    return Bridge(
        Ledger.open(pg_url),
        BridgeSettings(
            principals=[SEEDED_PRINCIPAL],
            mcp_servers=[McpServerConfig(name="gone", url=UNREACHABLE_MCP)],
            scheduler=FAST,
            replica=config,
        ),
        owns_ledger=True,
    )


async def test_a_starting_replica_claims_the_oldest_due_handles_up_to_its_cap(
    pg_url: str,
) -> None:
    """Recovery claims round after round (each handed to the scheduler while the next is
    claimed) until nothing is left or the replica's cap is reached: the oldest due first."""
    seed_open_tasks(pg_url, 2_500, UNREACHABLE_MCP, interval_ms=600_000)
    config = ReplicaConfig("replica-r", lease_ms=60_000, claim_batch=1_000, max_tasks=2_200)
    bridge = _seeded_replica(pg_url, config)
    async with bridge:
        assert bridge._replica is not None and bridge.last_recovery is not None
        assert bridge.last_recovery.tasks_watched == 2_200
        assert bridge._requester.scheduler.watched_count == 2_200
        with bridge._ledger.engine.connect() as conn:
            rows = conn.execute(select(TASKS.c.task_id, TASKS.c.lease_owner)).all()
    held = sorted(int(task_id.rsplit("-", 1)[1]) for task_id, owner in rows if owner)
    assert held == list(range(2_200)), "the 2,200 oldest due, each once"


async def test_an_even_share_claims_half_and_polls_each_handle_when_it_is_due(
    pg_url: str,
) -> None:
    """With ``share_evenly`` a replica claims no more than ceil(open / live replicas); the
    handles it takes are first polled when the ledger says they are due, not all at once."""
    ledger = Ledger.open(pg_url)
    other = ReplicaRegistry(ledger).register("replica-other", 60_000)  # live, holds nothing
    first_due = ledger.clock() + 600_000
    seed_open_tasks(pg_url, 1_001, UNREACHABLE_MCP, interval_ms=600_000, first_due_ms=first_due)
    config = ReplicaConfig("replica-even", lease_ms=60_000, claim_batch=300, share_evenly=True)
    bridge = _seeded_replica(pg_url, config)
    async with bridge:
        scheduler = bridge._requester.scheduler
        assert scheduler.watched_count == 501, "ceil(1,001 / 2 live replicas)"
        with bridge._ledger.engine.connect() as conn:
            rows = conn.execute(
                select(TASKS.c.ref, TASKS.c.next_poll_due_ms).where(
                    TASKS.c.lease_owner.is_not(None)
                )
            ).all()
        assert len(rows) == 501
        assert all(scheduler.due_ms(ref) == due for ref, due in rows), "not polled at once"
        leases = TenantLeases(ledger.for_principal(SEEDED_PRINCIPAL))
        assert leases.even_share_room(other) == 501, "the other's share is still free"
    ledger.close()
