"""Waiting costs nothing: waiters wake on commits (this process's at once, another process's by
PostgreSQL NOTIFY or SQLite's backed-off ``data_version`` probe), never by polling the ledger,
and a subscriber sees every event exactly once however the wakes race the writes."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import pytest
from sqlalchemy import event

from bridge import Bridge, BridgeSettings, events as ev
from bridge._ledger.commit.commit_signals import CommitPublisher
from bridge._ledger.coordination import waiters as notifier_module
from bridge._ledger.coordination.waiters import PROBE_MAX_S, CommitNotifier
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from tests.support.builders import new_run, new_task
from tests.support.remote_commits import complete_task
from tests.support.writers import EVENTS_PER_ITERATION, write_events

pytestmark = pytest.mark.anyio

P = "acme"  # the principal tests/support/writers.py writes as
BACKENDS = [
    pytest.param("wall_ledger", id="sqlite"),
    pytest.param("wall_pg_ledger", id="postgresql", marks=pytest.mark.postgres),
]
WAITERS = 100
IDLE_WINDOW_S = 2.0


@pytest.fixture
def any_ledger(request: pytest.FixtureRequest) -> Ledger:
    ledger: Ledger = request.getfixturevalue(request.param)
    return ledger


def _url(ledger: Ledger) -> str:
    return ledger.engine.url.render_as_string(hide_password=False)


def _notifier(bridge: Bridge) -> CommitNotifier:
    assert bridge._notifier is not None
    return bridge._notifier


@contextmanager
def counted_statements(ledger: Ledger) -> Iterator[list[str]]:
    """Every SQL statement the ledger's engine runs while the block is open."""
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(ledger.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(ledger.engine, "before_cursor_execute", count)


@asynccontextmanager
async def bridge_on(ledger: Ledger) -> AsyncIterator[Bridge]:
    async with Bridge(ledger, BridgeSettings(principals=[P], recover_on_start=False)) as bridge:
        yield bridge


async def _wait_until(predicate: Any, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def _spawn_completion(url: str, task_ref: str) -> multiprocessing.process.BaseProcess:
    process = multiprocessing.get_context("spawn").Process(
        target=complete_task, args=(url, P, task_ref)
    )
    process.start()
    return process


@pytest.mark.parametrize("any_ledger", BACKENDS, indirect=True)
async def test_idle_waiters_read_nothing_and_an_in_process_commit_wakes_its_waiter(
    any_ledger: Ledger,
) -> None:
    tenant = any_ledger.for_principal(P)
    runs = [new_run(tenant) for _ in range(WAITERS)]
    tasks = [new_task(tenant, run.ref) for run in runs]
    woke: dict[str, float] = {}
    async with bridge_on(any_ledger) as bridge, anyio.create_task_group() as group:

        async def wait_one(task_ref: str) -> None:
            await (await bridge.run_of(P, task_ref)).wait_for([task_ref], timeout=60)
            woke[task_ref] = time.monotonic()

        async def follow(run_ref: str) -> None:
            async for _ in bridge.run(P, run_ref).subscribe(after_seq=2):  # past creation
                woke[run_ref] = time.monotonic()
                return

        for n, (run, task) in enumerate(zip(runs, tasks, strict=True)):
            group.start_soon(wait_one if n % 2 else follow, task.ref if n % 2 else run.ref)
        notifier = _notifier(bridge)
        await _wait_until(lambda: notifier.waiting == WAITERS)
        await anyio.sleep(0.5)  # past any first look at the freshly watched runs
        probes, checks = notifier.probes, notifier.checks
        with counted_statements(any_ledger) as statements:
            await anyio.sleep(IDLE_WINDOW_S)
        assert not woke
        # ~0 ledger reads per waiter per second: none at all, and a handful of data_version
        # probes (SQLite; its own connection) for all waiters together, backing off.
        assert statements == []
        assert notifier.checks == checks
        assert notifier.probes - probes <= 4

        waited = tasks[1]  # an odd index: a wait_for
        settled_at = time.monotonic()
        tenant.tasks.observe_task(
            waited.ref,
            TaskObservation(TaskStatus.COMPLETED, result={"content": [], "isError": False}),
        )
        followed = runs[0]  # an even index: a subscriber
        tenant.runs.record_anomaly(followed.ref, "probe", "wake")
        await _wait_until(lambda: waited.ref in woke and followed.ref in woke, timeout=5)
        assert woke[waited.ref] - settled_at < 1.0  # not a poll interval: the commit itself
        assert set(woke) == {waited.ref, followed.ref}  # nobody else was woken to return
        group.cancel_scope.cancel()


@pytest.mark.parametrize("any_ledger", BACKENDS, indirect=True)
async def test_a_commit_by_another_process_wakes_a_waiter_within_a_bound(
    any_ledger: Ledger,
) -> None:
    tenant = any_ledger.for_principal(P)
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    sqlite = any_ledger.dialect.name == "sqlite"
    async with bridge_on(any_ledger) as bridge:
        notifier = _notifier(bridge)
        done = anyio.Event()
        views: list[Any] = []

        async def waiter() -> None:
            views.extend(await bridge.run(P, run.ref).wait_for([task.ref], timeout=60))
            done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await _wait_until(lambda: notifier.waiting == 1)
            if sqlite:  # idle long enough for the probe to have backed off to its longest
                await _wait_until(lambda: notifier.probes >= 5, timeout=20)
            process = _spawn_completion(_url(any_ledger), task.ref)
            await anyio.to_thread.run_sync(process.join, 60)
            assert process.exitcode == 0
            committed_at = time.monotonic()
            bound = PROBE_MAX_S + 1.0 if sqlite else 1.0  # NOTIFY: at once; SQLite: next tick
            with anyio.fail_after(bound):
                await done.wait()
            latency = time.monotonic() - committed_at
        assert views[0].status is TaskStatus.COMPLETED
        assert latency < bound


@pytest.mark.parametrize("any_ledger", BACKENDS[:1], indirect=True)
async def test_this_process_commits_cost_the_sqlite_probe_no_read_and_others_still_wake(
    any_ledger: Ledger,
) -> None:
    """The probe asks the connection this process writes through: its own commits (announced to
    the waiters already) are no change there, so a waiter on a task this process works on costs
    no read of the watched runs per tick; another process's commit still wakes it."""
    tenant = any_ledger.for_principal(P)
    run = new_run(tenant)
    task = new_task(tenant, run.ref)
    async with bridge_on(any_ledger) as bridge:
        notifier = _notifier(bridge)
        done = anyio.Event()

        async def waiter() -> None:
            await bridge.run(P, run.ref).wait_for([task.ref], timeout=60)
            done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await _wait_until(lambda: notifier.waiting == 1)
            await _wait_until(lambda: notifier.probes >= 1, timeout=20)
            probes, checks = notifier.probes, notifier.checks
            while notifier.probes < probes + 3:  # this process commits between every tick
                new_run(tenant)  # on the event loop, as the bridge's own commits are
                await anyio.sleep(0.05)
            assert notifier.checks == checks
            assert not done.is_set()
            process = _spawn_completion(_url(any_ledger), task.ref)
            await anyio.to_thread.run_sync(process.join, 60)
            assert process.exitcode == 0
            with anyio.fail_after(PROBE_MAX_S + 1.0):  # the next tick at the latest
                await done.wait()
        assert notifier.checks > checks


@pytest.mark.parametrize("any_ledger", BACKENDS, indirect=True)
async def test_a_subscriber_sees_every_event_once_while_others_write_concurrently(
    any_ledger: Ledger,
) -> None:
    """Wakes race the writes (a thread of this process and two other processes): the
    subscribers (one from the start, one from a sequence number) miss nothing and see
    nothing twice."""
    iterations = 15
    tenant = any_ledger.for_principal(P)
    run = new_run(tenant)  # seq 1: run.registered
    expected = 1 + 3 * iterations * EVENTS_PER_ITERATION
    url = _url(any_ledger)
    async with bridge_on(any_ledger) as bridge:

        async def collect(after_seq: int) -> list[int]:
            seqs: list[int] = []
            async for event in bridge.run(P, run.ref).subscribe(after_seq=after_seq):
                seqs.append(event.seq)
                if event.seq >= expected:
                    return seqs
            return seqs

        results: dict[int, list[int]] = {}

        async def subscriber(after_seq: int) -> None:
            results[after_seq] = await collect(after_seq)

        context = multiprocessing.get_context("spawn")
        processes = [
            context.Process(target=write_events, args=(url, run.ref, iterations, f"p{i}"))
            for i in range(2)
        ]
        thread = threading.Thread(target=write_events, args=(url, run.ref, iterations, "t"))
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                group.start_soon(subscriber, 0)
                group.start_soon(subscriber, 7)
                for process in processes:
                    process.start()
                thread.start()
                for process in processes:
                    await anyio.to_thread.run_sync(process.join, 100)
                await anyio.to_thread.run_sync(thread.join, 100)
        assert [p.exitcode for p in processes] == [0, 0]
    assert results[0] == list(range(1, expected + 1))
    assert results[7] == list(range(8, expected + 1))
    probes = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.Anomaly)]
    assert len(probes) == 3 * iterations


@pytest.mark.postgres
async def test_a_lost_notification_delays_a_subscriber_only_until_the_backstop(
    wall_pg_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process commits but its NOTIFY never arrives (here: a writer without the
    publisher): the subscriber still sees the event, at the latest after the backstop."""
    monkeypatch.setattr(notifier_module, "BACKSTOP_S", 0.5)
    tenant = wall_pg_ledger.for_principal(P)
    run = new_run(tenant)
    silent = Ledger.open(_url(wall_pg_ledger), upgrade=False)
    for listener in [lst for lst in silent._listeners if isinstance(lst, CommitPublisher)]:
        silent.remove_listener(listener)
    try:
        async with bridge_on(wall_pg_ledger) as bridge:
            seen: list[str] = []

            async def follow() -> None:
                async for event in bridge.run(P, run.ref).subscribe(after_seq=run.event_count):
                    seen.append(event.type)
                    return

            async with anyio.create_task_group() as group:
                group.start_soon(follow)
                await _wait_until(lambda: _notifier(bridge).waiting == 1)
                silent.for_principal(P).runs.record_anomaly(run.ref, "probe", "no notify")
                with anyio.fail_after(5):  # the backstop is 0.5 s here (30 s by default)
                    while not seen:
                        await anyio.sleep(0.05)
            assert seen == ["anomaly"]
    finally:
        silent.close()
