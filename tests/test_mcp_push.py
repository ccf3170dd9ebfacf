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
from bridge._config import McpServerConfig, PushConfig, SchedulerConfig
from bridge._ledger.store import Ledger
from bridge._lifecycle import TaskStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._outcomes import TaskHandle
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
async def requester(
    wall_ledger: Ledger, push_server: ServerProcess
) -> AsyncIterator[TaskRequester]:
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
        if run_ref == run.ref and isinstance(tenant.reads.events(run.ref)[-1], ev.TaskTerminal):
            row = tenant.reads.get_task(handle.task_ref)
            seen.append((row.status, row.result))
            settled.set()

    wall_ledger.add_listener(on_commit)
    try:
        with anyio.fail_after(SLOW_POLL_MS / 1000 / 3):  # well under the 30 s poll interval
            await settled.wait()
    finally:
        wall_ledger.remove_listener(on_commit)
    assert time.monotonic() - started < SLOW_POLL_MS / 1000 / 3
    result = {"content": [{"type": "text", "text": "done push_job"}]}
    assert seen == [(TaskStatus.COMPLETED, result)]
    assert not requester.scheduler.is_watching(handle.task_ref)
    assert requester.push.stats.applied >= 1 and requester.push.stats.listens >= 1
    after = (await server_stats(push_server.url))["gets"].get("push_job", 0)
    assert after == before  # settled without a single tasks/get
    raw = tenant.reads.get_task(handle.task_ref).task_id
    assert raw not in caplog.text  # the listen request names it: the logs must not
    assert raw not in json.dumps([e.model_dump(mode="json") for e in tenant.reads.events(run.ref)])


async def test_a_malformed_push_is_an_anomaly_and_the_poll_settles_the_task(
    requester: TaskRequester, wall_ledger: Ledger, push_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    handle = await _start(requester, run.ref, "garbled_push_job", seconds=0.5, poll_ms=SLOW_POLL_MS)
    # Both garbled frames are rejected; each wakes the poller, and tasks/get tells the truth
    # long before the 30 s poll would have been due.
    await wait_closed(tenant, handle.task_ref, timeout=SLOW_POLL_MS / 1000 / 3)
    done = tenant.reads.get_task(handle.task_ref)
    assert done.status is TaskStatus.COMPLETED
    assert done.result == {"content": [{"type": "text", "text": "done garbled_push_job"}]}
    anomalies = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.Anomaly)]
    assert [(a.kind, a.detail, a.task_ref) for a in anomalies] == [
        ("malformed_notification", f"notifications/tasks: {problem}", handle.task_ref)
        for problem in ("unknown status", "completed without result")
    ]
    types = event_types(tenant, run.ref)
    assert types[:2] == ["run.registered", "task.created"] and types[-1] == "task.terminal"
    assert requester.push.stats.rejected == 2
    assert (await server_stats(push_server.url))["gets"]["garbled_push_job"] >= 1


async def test_a_change_before_the_acknowledgement_is_seen_by_the_next_poll(
    requester: TaskRequester, wall_ledger: Ledger
) -> None:
    """A task that completes before the listen stream names it is never pushed (the server
    pushes changes, not states). The handle's first poll after the acknowledgement still runs
    at the server's interval (1 s), not at the 30-s backstop, and finds it completed."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    listens = requester.push.stats.listens
    handle = await _start(requester, run.ref, "push_job", seconds=0.0, poll_ms=1_000)
    await wait_until(lambda: requester.push.stats.listens > listens, what="listening")
    await wait_closed(tenant, handle.task_ref, timeout=SLOW_POLL_MS / 1000 / 3)
    assert tenant.reads.get_task(handle.task_ref).status is TaskStatus.COMPLETED
    assert requester.push.stats.applied == 0


async def _slow_acknowledgements(url: str, seconds: float) -> None:
    async with Client(url) as client:
        await client.call_tool("slow_acknowledgements", {"seconds": seconds})


async def test_no_poll_is_spent_while_the_listen_awaits_its_acknowledgement(
    wall_ledger: Ledger, push_server: ServerProcess
) -> None:
    """The server asks for a poll every 200 ms but acknowledges the listen naming the task
    only after 2 s (a busy server). The polls that come due meanwhile wait for the
    acknowledgement: the poll after it has to be sent anyway (it sees any change made
    before), so the task is polled once (twice if a loaded machine sent its first poll before
    the listen left), not once per 200 ms, and its completion arrives pushed."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    before = (await server_stats(push_server.url))["gets"].get("push_job", 0)
    await _slow_acknowledgements(push_server.url, 2.0)
    try:
        servers = _push_servers(push_server)
        async with TaskRequester(wall_ledger, servers, scheduler=HONOURING) as req:
            handle = await _start(req, run.ref, "push_job", seconds=3.0, poll_ms=200)
            await wait_closed(tenant, handle.task_ref, timeout=30)
            held, applied = req.scheduler.stats.held_for_listen, req.push.stats.applied
    finally:
        await _slow_acknowledgements(push_server.url, 0)
    gets = (await server_stats(push_server.url))["gets"].get("push_job", 0) - before
    assert held >= 1  # a poll came due before the acknowledgement, and waited
    assert gets <= 2, gets  # without waiting: one per 200 ms until the acknowledgement
    assert applied >= 1 and tenant.reads.get_task(handle.task_ref).status is TaskStatus.COMPLETED


async def test_a_listen_never_acknowledged_leaves_the_handle_to_polling(
    wall_ledger: Ledger, push_server: ServerProcess
) -> None:
    """The acknowledgement does not come within ``ack_timeout_s``: the polls held for it are
    sent then, and the task settles by polling long before the late acknowledgement."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    await _slow_acknowledgements(push_server.url, 10)
    try:
        push = PushConfig(ack_timeout_s=0.5, backoff_base_ms=30_000)
        async with TaskRequester(
            wall_ledger, _push_servers(push_server), scheduler=FAST, push=push
        ) as req:
            handle = await _start(req, run.ref, "push_job", seconds=0.2, poll_ms=100)
            await wait_closed(tenant, handle.task_ref, timeout=8)  # the late one comes at 10 s
            assert req.push.stats.listens == 0 and req.push.stats.lost >= 1
            assert req.scheduler.stats.held_for_listen >= 1
    finally:
        await _slow_acknowledgements(push_server.url, 0)
    assert tenant.reads.get_task(handle.task_ref).status is TaskStatus.COMPLETED


def _push_servers(push_server: ServerProcess) -> list[McpServerConfig]:
    return [McpServerConfig(name="push", url=push_server.url)]


async def test_new_handles_get_streams_of_their_own_and_a_merge_polls_what_it_carried(
    wall_ledger: Ledger, push_server: ServerProcess
) -> None:
    """Two handles, each named by a stream of its own, are at the backstop; a third makes one
    of the two streams (max 2) merge into its new stream. Closing that stream may lose a push
    already on its way, so the handle it carried is polled once more at the server's 1 s (not
    at the 60-s backstop), and every task is then settled by its push."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    servers = [McpServerConfig(name="push", url=push_server.url)]
    async with TaskRequester(wall_ledger, servers, push=PushConfig(max_streams=2)) as requester:
        scheduler, handles = requester.scheduler, []

        def at_backstop(handle: TaskHandle) -> bool:
            due = scheduler.due_ms(handle.task_ref)
            return due is not None and due - time.time() * 1000 > 30_000

        for _ in range(2):
            handles.append(await _start(requester, run.ref, "push_job", poll_ms=1_000, hold=True))
            await wait_until(lambda: at_backstop(handles[-1]), timeout=15, what="at the backstop")
        assert requester.push.stats.listens == 2 and requester.push.stats.merges == 0
        before = (await server_stats(push_server.url))["gets"].get("push_job", 0)
        handles.append(await _start(requester, run.ref, "push_job", poll_ms=1_000, hold=True))
        await wait_until(lambda: requester.push.stats.merges == 1, what="the streams merged")

        async def polled_again() -> bool:
            gets = (await server_stats(push_server.url))["gets"].get("push_job", 0)
            return gets - before >= 2  # the new handle's first poll, and the carried handle's

        await wait_until(polled_again, timeout=15, what="the carried handles polled once more")
        await wait_until(lambda: all(at_backstop(h) for h in handles), what="all at the backstop")
        async with Client(push_server.url) as client:
            await client.call_tool("release_held", {})
        for handle in handles:
            await wait_closed(tenant, handle.task_ref, timeout=15)
        assert requester.push.stats.applied == 3


async def test_a_dropped_listen_stream_leaves_polling_to_settle_then_listens_again(
    requester: TaskRequester, wall_ledger: Ledger, push_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    push = requester.push
    polled = await _start(requester, run.ref, "push_job", seconds=1.5, poll_ms=300)
    await wait_until(lambda: push.stats.listens >= 1, what="listening")
    lost_before = push.stats.lost
    async with Client(push_server.url) as operator:  # kill the listen connection, refuse 2 s
        await operator.call_tool("drop_listeners", {"refuse_s": 2.0})
    await wait_until(lambda: push.stats.lost > lost_before, what="stream loss noticed")
    await wait_closed(tenant, polled.task_ref, timeout=10)  # by polling: nobody pushes now
    assert tenant.reads.get_task(polled.task_ref).status is TaskStatus.COMPLETED
    assert push.stats.applied == 0
    # Once the server listens again, the backoff re-opens the stream and pushes resume.
    listens = push.stats.listens
    pushed = await _start(requester, run.ref, "push_job", seconds=3.0, poll_ms=SLOW_POLL_MS)
    await wait_closed(tenant, pushed.task_ref, timeout=SLOW_POLL_MS / 1000 / 3)
    assert push.stats.listens > listens and push.stats.applied == 1


async def test_a_server_without_push_support_gets_no_listen(
    wall_ledger: Ledger, tasks_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    servers = [McpServerConfig(name="tasks", url=tasks_server.url)]
    async with TaskRequester(wall_ledger, servers, scheduler=FAST) as requester:
        outcome = await requester.call_tool(
            PRINCIPAL, run.ref, "tasks", "slow_report", {"quarter": "Q4", "seconds": 0.3}
        )
        assert isinstance(outcome, TaskHandle)
        await wait_closed(tenant, outcome.task_ref)
        assert requester.push.stats.unsupported == {"tasks"}
        assert requester.push.stats.listens == 0 and requester.push.stats.lost == 0


async def test_a_listen_acknowledged_without_task_ids_leaves_the_server_to_polling(
    wall_ledger: Ledger, adversarial_server: ServerProcess
) -> None:
    """The official SDK's own ListenHandler serves subscriptions/listen but honours no
    ``taskIds``: the stream is closed again and the task is settled by polling."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    servers = [McpServerConfig(name="sdk", url=adversarial_server.url)]
    async with TaskRequester(wall_ledger, servers, scheduler=FAST) as requester:
        outcome = await requester.call_tool(PRINCIPAL, run.ref, "sdk", "honest", {})
        assert isinstance(outcome, TaskHandle)
        await wait_closed(tenant, outcome.task_ref)
        assert tenant.reads.get_task(outcome.task_ref).status is TaskStatus.COMPLETED
        await wait_until(lambda: requester.push.stats.unsupported == {"sdk"}, what="refused")
        assert requester.push.stats.listens == 0 and requester.push.stats.applied == 0


async def test_push_updates_can_be_turned_off_per_server(
    wall_ledger: Ledger, push_server: ServerProcess
) -> None:
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    listens = (await server_stats(push_server.url))["counts"].get("listens", 0)
    servers = [McpServerConfig(name="push", url=push_server.url, push_updates=False)]
    async with TaskRequester(wall_ledger, servers, scheduler=FAST) as requester:
        handle = await _start(requester, run.ref, "push_job", seconds=0.3, poll_ms=100)
        await wait_closed(tenant, handle.task_ref)
        assert requester.push.stats.applied == 0
    assert (await server_stats(push_server.url))["counts"].get("listens", 0) == listens


async def _named_by_listens(url: str, count: int) -> bool:
    return (await server_stats(url))["listening"]["task_ids"] >= count


async def _gets_for(
    wall_ledger: Ledger, url: str, *, push: bool, tasks: int, poll_ms: int, seconds: float
) -> tuple[int, int, float, int]:
    """``tasks/get`` the server answered (all, and from the release on), the slowest settle
    time, and the pushes applied, for N tasks whose clocks start together.

    The tasks are started held, and released (their ``seconds`` start) once the bridge's listen
    stream names every one of them: how long the stream takes to follow new handles depends on
    the machine's load, and is not what is measured. Settle times count from the release."""
    tenant = wall_ledger.for_principal(PRINCIPAL)
    run = new_run(tenant)
    before = (await server_stats(url))["gets"].get("push_job", 0)
    servers = [McpServerConfig(name="push", url=url, push_updates=push)]
    async with TaskRequester(wall_ledger, servers, scheduler=HONOURING) as requester:
        handles = [
            await _start(
                requester, run.ref, "push_job", seconds=seconds, poll_ms=poll_ms, hold=True
            )
            for _ in range(tasks)
        ]
        if push:
            await wait_until(
                lambda: _named_by_listens(url, tasks), timeout=30, what="a stream naming all"
            )
        released = (await server_stats(url))["gets"].get("push_job", 0)
        async with Client(url) as client:
            await client.call_tool("release_held", {})
        started = time.monotonic()
        for handle in handles:
            await wait_closed(tenant, handle.task_ref, timeout=30)
        slowest = time.monotonic() - started
        applied = requester.push.stats.applied
    after = (await server_stats(url))["gets"].get("push_job", 0)
    return after - before, after - released, slowest, applied


# The slow interval leaves 4 s between a task's start and its first poll for the stream to
# name it and the task's 1 s to run: under a loaded machine's delays, no poll comes first.
@pytest.mark.parametrize("poll_ms", [5_000, 200])
async def test_polls_saved(wall_ledger: Ledger, push_server: ServerProcess, poll_ms: int) -> None:
    """N tasks of 1 s each; the figures are quoted in docs/mcp-side.md ("Push updates")."""
    n = 10
    gets, gets_running, slowest, applied = await _gets_for(
        wall_ledger, push_server.url, push=True, tasks=n, poll_ms=poll_ms, seconds=1.0
    )
    gets_without, running_without, slowest_without, _ = await _gets_for(
        wall_ledger, push_server.url, push=False, tasks=n, poll_ms=poll_ms, seconds=1.0
    )
    print(
        f"\npollIntervalMs={poll_ms} N={n}: tasks/get with push {gets} (slowest {slowest:.2f} s),"
        f" without {gets_without} (slowest {slowest_without:.2f} s); while the tasks ran:"
        f" {gets_running} with push, {running_without} without"
    )
    if poll_ms > 1_000:  # a slow interval: push settles every task before its first poll
        assert applied == n and gets == 0 and gets_without >= n and slowest < slowest_without
    else:
        # A fast interval: before the stream names a handle it is polled at the server's
        # interval (how often depends on the load). Once named, at most one poll each (the
        # first sent after the acknowledgement, which sees any earlier change), then only the
        # 30-s backstop: while the tasks run, polling drops from one per 200 ms to (nearly)
        # nothing. That poll may also win the race against a push: most are pushed.
        assert gets_running <= 2 * n and running_without >= 3 * n
        assert applied >= n // 2
