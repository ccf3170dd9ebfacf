"""Three replica processes on one PostgreSQL ledger share 1,000 open task handles.

Real parts throughout: PostgreSQL 15, an official-SDK Tasks server on loopback that logs every
``tasks/get`` with the caller (each replica presents its id as its bearer token), and three
``bench.replica_process`` processes running :class:`bridge.Bridge` in leased mode. One replica
is SIGKILLed mid-way; the others must take over its handles within a lease period.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from bench.scale_out import call_json, replica_stats
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from tests.support.bridging import wait_until
from tests.support.builders import new_run, new_task
from tests.support.postgres import fresh_database
from tests.support.processes import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]  # replica processes, one SIGKILLed

TASKS = 1_000
INTERVAL_MS = 3_000  # each task asks to be polled every 3 s ...
POLLS_TO_COMPLETE = 4  # ... and completes on its 4th tasks/get
LEASE_MS = 6_000  # renewed every 2 s: a killed replica's lease has >= 4 s (> interval) left
REPLICAS = ("replica-a", "replica-b", "replica-c")


@pytest.fixture
def shared_pg(postgres_admin_url: str) -> Iterator[str]:
    with fresh_database(postgres_admin_url) as url:
        Ledger.open(url).close()  # migrated once, before any replica starts
        yield url


@pytest.fixture
def logging_server() -> Iterator[ServerProcess]:
    with ServerProcess("bench.fast_tasks_server", args=["--log-polls"]) as server:
        yield server


def _replica(name: str, db: str, mcp: str) -> ServerProcess:
    return ServerProcess(
        "bench.replica_process",
        args=[
            "--db", db, "--mcp", mcp, "--replica-id", name, "--lease-ms", str(LEASE_MS),
            "--claim-every-ms", "200", "--claim-batch", "100",
        ],
    )  # fmt: skip


async def _stats(replica: ServerProcess) -> dict[str, Any]:
    return await replica_stats(replica.port)


async def _poll_log(url: str) -> list[tuple[str, float, str]]:
    return [tuple(entry) for entry in await call_json(url, "poll_log")]  # type: ignore[misc]


async def test_three_replicas_share_the_handles_and_survive_a_kill(
    shared_pg: str, logging_server: ServerProcess
) -> None:
    replicas = [_replica(name, shared_pg, logging_server.url) for name in REPLICAS]
    for replica in replicas:
        replica.start(timeout=30)
    try:
        await wait_until(
            lambda: _all_registered(replicas), timeout=30, what="three replicas registered"
        )
        ledger = Ledger.open(shared_pg)
        tenant = ledger.for_principal("acme")
        run = new_run(tenant)
        task_ids = [f"done-{INTERVAL_MS}-{POLLS_TO_COMPLETE}-{n}" for n in range(TASKS)]
        refs = [
            new_task(
                tenant,
                run.ref,
                task_id=task_id,
                tool="park",
                ttl_ms=None,
                poll_interval_ms=INTERVAL_MS,
                server_endpoint=logging_server.url,
                server_name="fast",
            ).ref
            for task_id in task_ids
        ]

        async def all_held() -> bool:
            stats = [await _stats(r) for r in replicas]
            return sum(s.get("watched", 0) for s in stats) + _closed(tenant, refs) >= TASKS

        await wait_until(all_held, timeout=60, what="every handle claimed by some replica")

        async def all_polled_once() -> bool:
            return len({entry[0] for entry in await _poll_log(logging_server.url)}) == TASKS

        await wait_until(all_polled_once, timeout=60, interval=0.5, what="every task polled")
        stats = {r.port: await _stats(r) for r in replicas}
        victim = max(replicas, key=lambda r: stats[r.port]["watched"])
        victim_name = REPLICAS[replicas.index(victim)]
        assert stats[victim.port]["watched"] > 0
        victim.kill()  # SIGKILL: no clean hand-over, its membership simply stops being renewed

        await wait_until(
            lambda: _closed(tenant, refs) == TASKS, timeout=120, interval=0.5,
            what="every task terminal",
        )  # fmt: skip
        survivors = [r for r in replicas if r is not victim]
        survivor_stats = [await _stats(r) for r in survivors]
        log = await _poll_log(logging_server.url)
    finally:
        for replica in replicas:
            replica.stop()

    polls: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for task_id, at_ms, caller in log:
        polls[task_id].append((at_ms, caller))
    assert set(polls) == set(task_ids), "every task polled"
    callers = {caller for _, _, caller in log}
    assert callers == set(REPLICAS), f"all three replicas polled: {callers}"

    # Never two polls of one task within an interval, by any pair of replicas (a single
    # replica spaces its own polls by the interval; 0.8 absorbs request-latency jitter).
    too_close = []
    taken_over = 0
    for task_id, seen in polls.items():
        seen.sort()
        for (t1, c1), (t2, c2) in itertools.pairwise(seen):
            if t2 - t1 < 0.8 * INTERVAL_MS:
                too_close.append((task_id, c1, c2, round(t2 - t1)))
            if c1 == victim_name and c2 != victim_name:
                taken_over += 1
        assert len(seen) >= POLLS_TO_COMPLETE, f"{task_id}: {len(seen)} polls"
    assert taken_over > 0, "the killed replica's handles were polled by the others afterwards"
    # A holder spaces its polls by the interval from the previous reply, and a new holder takes
    # a handle only after the old lease ran out. Two exceptions, both counted by the replica that
    # hits them: a failed poll is retried on backoff, and a lease that lapsed under load (the
    # holder's renewal came late) lets another replica claim and poll early — the old holder
    # counts each such handle, whether its write was refused (leases_lost) or it dropped all it
    # held on finding its membership lapsed (dropped_on_lapse). Anything closer than that
    # accounting allows is a broken guarantee; the victim's counts are from before the kill.
    excused = sum(_excused(s) for s in survivor_stats) + _excused(stats[victim.port])
    assert len(too_close) <= excused, (too_close[:10], survivor_stats, stats[victim.port])

    # A task completes on its POLLS_TO_COMPLETE-th tasks/get, whoever asks. A poll from then
    # on that is not the task's last was seen by a holder that could not record it: the killed
    # replica, or a survivor whose write was refused or whose handles were dropped (a lease
    # lapsed under load: leases_lost, dropped_on_lapse) or whose request failed (failures). Each
    # such observation is counted by the survivor that made it; how many there are depends on
    # load, so no exact poll count is asserted.
    unrecorded = [
        (task_id, caller)
        for task_id, seen in polls.items()
        for _, caller in seen[POLLS_TO_COMPLETE - 1 : -1]
        if caller != victim_name
    ]
    counted = sum(_excused(s) for s in survivor_stats)
    assert len(unrecorded) <= counted, (unrecorded[:10], survivor_stats)

    # No stale write: one terminal event per task, no regression or other anomaly recorded.
    events = tenant.reads.events(run.ref)
    terminal = [e for e in events if e.type == "task.terminal"]
    assert len(terminal) == TASKS and len({e.task_ref for e in terminal}) == TASKS  # type: ignore[attr-defined]
    assert [e for e in events if e.type == "anomaly"] == []
    assert all(tenant.reads.get_task(ref).status is TaskStatus.COMPLETED for ref in refs[:50])
    ledger.close()


def _excused(stats: dict[str, Any]) -> int:
    """Observations a replica counted as made without the right to record them."""
    return int(stats["leases_lost"] + stats["failures"] + stats["dropped_on_lapse"])


async def _all_registered(replicas: list[ServerProcess]) -> bool:
    return all([(await _stats(r)).get("replica") for r in replicas])


def _closed(tenant: Any, refs: list[str]) -> int:
    return len(refs) - len(tenant.reads.list_tasks(open_only=True))
