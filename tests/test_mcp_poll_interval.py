"""``pollIntervalMs`` honoured exactly: never polled sooner than the server asked (jitter only
lengthens), a changed interval followed from the next poll, no default ceiling.

Time is an injected clock the test moves in 1 s steps; after each step the scheduler looks
again (``wake``) and the test waits for that pass to finish, so every poll is stamped with the
injected time it was sent at (``stats.lateness``: due time and lateness).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from bridge import events as ev
from bridge._config import McpServerConfig, SchedulerConfig
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._mcp.polling import scheduler as scheduler_module
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._outcomes import TaskHandle
from tests.conftest import FakeClock
from tests.servers.adversarial_server import CHANGING_POLL_MS
from tests.support.bridging import wait_until
from tests.support.builders import new_run
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.anyio
P = "acme"
STEP_MS = 1_000
JITTER = 0.1


async def _step(requester: TaskRequester, clock: FakeClock) -> None:
    """Move the injected clock one step and let the scheduler finish whatever fell due."""
    scheduler = requester.scheduler
    loops = scheduler.stats.loops
    clock.advance(STEP_MS)
    scheduler.wake()
    await wait_until(
        lambda: scheduler.stats.loops > loops and scheduler.in_flight == 0, interval=0.002
    )


def _poll_times(requester: TaskRequester) -> list[int]:
    return [due + late for due, late, _ in requester.scheduler.stats.lateness]


def _requester(ledger: Ledger, server: ServerProcess, clock: FakeClock) -> TaskRequester:
    config = McpServerConfig(name="s", url=server.url, request_timeout_s=5.0)
    # The default config: no ceiling. The clock is the ledger's injected one.
    scheduler = SchedulerConfig(jitter=JITTER)
    return TaskRequester(ledger, [config], scheduler=scheduler, clock=clock, rng=random.Random(7))


def test_interval_is_never_shortened_and_the_ceiling_is_opt_in() -> None:
    def interval(config: SchedulerConfig, server_ms: int | None) -> list[int]:
        scheduler = PollScheduler(None, None, None, config, rng=random.Random(1))  # type: ignore[arg-type]
        return [scheduler.timing.interval_for(server_ms) for _ in range(200)]

    assert all(60_000 <= i <= 66_000 for i in interval(SchedulerConfig(), 60_000))
    assert min(interval(SchedulerConfig(jitter=0.0), 60_000)) == 60_000
    assert all(100 <= i <= 110 for i in interval(SchedulerConfig(), 0))  # the floor stays
    capped = SchedulerConfig(ceiling_ms=30_000, jitter=0.0)  # opted in: the host's choice
    assert set(interval(capped, 60_000)) == {30_000}


def test_the_ttl_deadline_is_the_one_look_before_a_long_interval() -> None:
    scheduler = PollScheduler(None, None, None, SchedulerConfig(jitter=0.0))  # type: ignore[arg-type]
    assert scheduler.timing.next_due_ms(0, 60_000, ttl_deadline_ms=10_000) == 10_000
    assert scheduler.timing.next_due_ms(0, 60_000, ttl_deadline_ms=None) == 60_000
    assert scheduler.timing.next_due_ms(0, 60_000, ttl_deadline_ms=90_000) == 60_000
    # Deadline already passed (that poll decided): back to the server's interval.
    assert scheduler.timing.next_due_ms(20_000, 60_000, ttl_deadline_ms=10_000) == 80_000


def test_a_pushed_handle_is_polled_at_the_backstop_never_sooner_than_asked() -> None:
    scheduler = PollScheduler(None, None, None, SchedulerConfig(jitter=0.0))  # type: ignore[arg-type]
    assert scheduler.timing.interval_for(500, pushed=True) == 60_000  # the default backstop
    assert scheduler.timing.interval_for(500, pushed=False) == 500
    assert scheduler.timing.interval_for(120_000, pushed=True) == 120_000  # the server's, if longer
    # The TTL deadline's one look still comes first.
    assert scheduler.timing.next_due_ms(0, 500, ttl_deadline_ms=10_000, pushed=True) == 10_000
    capped = SchedulerConfig(jitter=0.0, ceiling_ms=20_000)  # the host's ceiling still holds
    assert PollScheduler(None, None, None, capped).timing.interval_for(500, pushed=True) == 20_000  # type: ignore[arg-type]
    off = SchedulerConfig(jitter=0.0, push_backstop_ms=None)  # keep polling as asked
    assert PollScheduler(None, None, None, off).timing.interval_for(500, pushed=True) == 500  # type: ignore[arg-type]


async def test_a_slow_interval_is_never_polled_sooner_and_a_change_is_followed(
    sqlite_ledger: Ledger, clock: FakeClock, adversarial_server: ServerProcess
) -> None:
    """ADVERSARIAL FAKE ``poll_changing``: created asking 60 s, its first tasks/get says 60 s
    again, every later one 90 s."""
    tenant = sqlite_ledger.for_principal(P)
    run = new_run(tenant)
    async with _requester(sqlite_ledger, adversarial_server, clock) as requester:
        requester.scheduler.stats.keep_lateness = True
        created_at = clock()
        handle = await requester.call_tool(P, run.ref, "s", "poll_changing", {})
        assert isinstance(handle, TaskHandle) and handle.task.poll_interval_ms == 60_000
        while len(_poll_times(requester)) < 3:
            await _step(requester, clock)
        polls = _poll_times(requester)
        task = tenant.reads.get_task(handle.task_ref)
    asked = [60_000, *CHANGING_POLL_MS]  # what was asked before each of the three polls
    gaps = [b - a for a, b in zip([created_at, *polls], polls, strict=False)]
    for gap, wanted in zip(gaps, asked, strict=False):
        # Never sooner than asked; at most the jitter and one clock step later.
        assert wanted <= gap <= wanted * (1 + JITTER) + STEP_MS, (gaps, asked)
    assert task.poll_interval_ms == CHANGING_POLL_MS[-1]  # the change is on record


async def test_a_real_servers_interval_is_recorded_and_used(
    sqlite_ledger: Ledger, clock: FakeClock, tasks_server: ServerProcess
) -> None:
    """fastmcp-tasks, a tool configured with ``poll_interval=60 s``: the first tasks/get waits
    the full minute of injected time (the old default ceiling polled after 30 s)."""
    tenant = sqlite_ledger.for_principal(P)
    run = new_run(tenant)
    async with _requester(sqlite_ledger, tasks_server, clock) as requester:
        requester.scheduler.stats.keep_lateness = True
        created_at = clock()
        handle = await requester.call_tool(P, run.ref, "s", "slow_poll_report", {"quarter": "Q3"})
        assert isinstance(handle, TaskHandle)
        assert handle.task.poll_interval_ms == 60_000
        (created,) = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskCreated)]
        assert created.poll_interval_ms == 60_000
        assert requester.scheduler.due_ms(handle.task_ref) >= created_at + 60_000
        while tenant.reads.get_task(handle.task_ref).is_open:
            await _step(requester, clock)
        polls = _poll_times(requester)
    task = tenant.reads.get_task(handle.task_ref)
    assert task.status is TaskStatus.COMPLETED and task.result["content"][0]["text"] == "report Q3"
    gaps = [b - a for a, b in zip([created_at, *polls], polls, strict=False)]
    assert polls and all(60_000 <= gap <= 66_000 + STEP_MS for gap in gaps), gaps


async def test_a_poll_in_flight_when_its_stream_ends_does_not_count_as_covered(
    sqlite_ledger: Ledger,
    clock: FakeClock,
    tasks_server: ServerProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream acknowledged, then lost while a poll is out: that poll left under the
    acknowledgement, but a change after the stream ended is pushed to nobody, so its reply must
    not put the handle on the backstop. The real server answers; the stream's end is injected
    between the request leaving and the reply landing (too narrow a window to hit otherwise)."""
    tenant = sqlite_ledger.for_principal(P)
    run = new_run(tenant)
    config = McpServerConfig(name="s", url=tasks_server.url, request_timeout_s=5.0)
    settings = SchedulerConfig(jitter=0.0, push_backstop_ms=600_000)
    requester = TaskRequester(
        sqlite_ledger, [config], scheduler=settings, clock=clock, rng=random.Random(7)
    )
    stream_ends_during_the_poll: list[str] = []
    fetch = scheduler_module.fetch_task

    async def fetch_while_the_stream_ends(connection: Any, task: Any) -> Any:
        reply = await fetch(connection, task)
        requester.scheduler.push_ended(stream_ends_during_the_poll)
        stream_ends_during_the_poll.clear()
        return reply

    monkeypatch.setattr(scheduler_module, "fetch_task", fetch_while_the_stream_ends)

    async def next_poll() -> None:
        polls = requester.scheduler.stats.polls
        while requester.scheduler.stats.polls == polls:
            await _step(requester, clock)

    async with requester:
        handle = await requester.call_tool(P, run.ref, "s", "wait_forever", {"seconds": 30})
        assert isinstance(handle, TaskHandle)
        scheduler, ref = requester.scheduler, handle.task_ref
        servers_interval = scheduler.timing.interval_for(handle.task.poll_interval_ms)
        assert servers_interval < 600_000
        scheduler.push_acknowledged([ref])
        stream_ends_during_the_poll.append(ref)
        await next_poll()
        assert not stream_ends_during_the_poll  # the stream ended while that poll was out
        assert scheduler.due_ms(ref) == clock() + servers_interval
        scheduler.push_acknowledged([ref])  # named again; nothing in the way this time
        await next_poll()
        assert scheduler.due_ms(ref) == clock() + 600_000
