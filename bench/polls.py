"""Polls per CPU-second: the raw SDK ``Client``, the bridge's lean ``tasks/get``, the scheduler.

Three pollers in one process against the same fast Tasks server, measured in alternating
windows (raw, lean, scheduler, raw, ...), so each sees the same machine conditions:

- **raw SDK**: :class:`bench.raw_sdk.RawPoller`, 16 callers on one shared ``Client``
  (``session.send_request(GetTaskRequest, DetailedTask)``);
- **lean path**: 16 callers on the bridge's own server connection, each call what
  :func:`bridge._mcp.task_requests.fetch_task` sends for a Tasks-extension handle
  (:mod:`bridge._mcp.wire.lean_get`, through the connection's ``httpx2`` client on its aiohttp
  engine);
- **scheduler**: the bridge's poll scheduler with ``handles`` open handles always due
  (demand far above capacity, 16 polls per server at once), started and held per window.
  Its CPU includes everything a poll costs in service: the due queue, limiter, reply
  checks, the unchanged-status test (no ledger write: the status does not change).
"""

from __future__ import annotations

import gc
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from bench.common import Report, register_open_tasks
from bench.raw_sdk import RAW_TASK_ID, RawPoller, Window, callers_window
from bridge._config import McpServerConfig, SchedulerConfig
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import OuterStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._mcp.servers import ServerConnection
from bridge._mcp.wire.lean_get import lean_fetch
from bridge._mcp.wire.shapes import GetTaskRequest, TaskIdParams

PRINCIPAL = "bench"
CONCURRENCY = 16


@dataclass
class Totals:
    polls: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0

    def add(self, window: Window) -> None:
        self.polls += window.polls
        self.cpu_s += window.cpu_s
        self.wall_s += window.wall_s

    @property
    def per_cpu_s(self) -> float:
        return self.polls / self.cpu_s if self.cpu_s > 0 else 0.0


async def _lean_window(connection: ServerConnection, seconds: float) -> Window:
    session = await connection.session()
    http, url = connection.http_client, connection.parsed_url
    assert http is not None and url is not None
    request = GetTaskRequest(params=TaskIdParams(task_id=RAW_TASK_ID))
    timeout, stats = connection.config.request_timeout_s, connection.lean_get_stats
    return await callers_window(
        lambda: lean_fetch(session, http, url, request, timeout, stats),
        CONCURRENCY,
        seconds,
    )


async def _scheduler_window(scheduler: PollScheduler, seconds: float) -> Window:
    polls0 = scheduler.stats.polls
    cpu0, wall0 = time.process_time(), time.perf_counter()
    scheduler.release()
    await anyio.sleep(seconds)
    scheduler.hold()
    with anyio.fail_after(30):
        while scheduler.in_flight:  # the polls started in the window finish in it
            await anyio.sleep(0.005)
    return Window(
        scheduler.stats.polls - polls0, time.perf_counter() - wall0, time.process_time() - cpu0
    )


def _register(tenant: TenantLedger, url: str, count: int) -> None:
    run_ref = tenant.runs.open_run(
        "local:bench",
        response_id="resp_polls",
        session_id="hsess_polls",
        status=OuterStatus.IN_PROGRESS,
    ).ref
    register_open_tasks(tenant, run_ref, count, 100, endpoint=url)


async def bench_polls(url: str, quick: bool, report: Report) -> None:
    rounds, seconds, handles = (3, 1.0, 500) if quick else (8, 2.0, 2_000)
    raw, lean, sched = Totals(), Totals(), Totals()
    config = McpServerConfig(name="fast", url=url)
    scheduler_config = SchedulerConfig(
        floor_ms=50, per_server_concurrency=CONCURRENCY, max_in_flight=64, jitter=0.0
    )
    with tempfile.TemporaryDirectory() as scratch:
        ledger = Ledger.open(Path(scratch) / "polls.db")
        tenant = ledger.for_principal(PRINCIPAL)
        _register(tenant, url, handles)
        async with (
            RawPoller(url, CONCURRENCY) as raw_poller,
            TaskRequester(ledger, [config], scheduler=scheduler_config) as requester,
        ):
            connection = requester.pool.connection("fast")
            scheduler = requester.scheduler
            scheduler.hold()
            now = ledger.clock()
            for task in tenant.reads.list_tasks(open_only=True):
                scheduler.watch(PRINCIPAL, task, due_ms=now)
            await _lean_window(connection, 0.3)  # warm: connections opened, code paths hot
            await _scheduler_window(scheduler, 0.3)
            gc.collect()
            for _ in range(rounds):
                raw.add(await raw_poller.measure(seconds))
                lean.add(await _lean_window(connection, seconds))
                sched.add(await _scheduler_window(scheduler, seconds))
            fallbacks = sum(connection.lean_get_stats.fallbacks.values())
            answered = connection.lean_get_stats.answered
            public = connection.lean_get_stats.sdk_path
        ledger.close()
    report.add("## 5. Polls per CPU-second: raw SDK `Client`, lean `tasks/get`, scheduler")
    report.add()
    report.add(
        f"{rounds} rounds of alternating {seconds:.0f}-second windows in one process, same "
        f"server, {CONCURRENCY} polls at once each; the scheduler watches {handles:,} handles, "
        "all always due. CPU is the client process's own (`time.process_time`)."
    )
    report.add()
    report.add("| poller | polls | polls/s | CPU per poll | polls per CPU-second | vs raw SDK |")
    report.add("|---|---|---|---|---|---|")
    for label, totals in (
        ("raw SDK `Client`", raw),
        ("lean `tasks/get` (bridge connection)", lean),
        ("bridge scheduler", sched),
    ):
        report.add(
            f"| {label} | {totals.polls:,} | {totals.polls / totals.wall_s:.0f} | "
            f"{totals.cpu_s / max(totals.polls, 1) * 1e6:.0f} µs | {totals.per_cpu_s:.0f} | "
            f"**{totals.per_cpu_s / raw.per_cpu_s:.2f}x** |"
        )
    report.add()
    report.add(
        f"Lean requests answered: {answered:,}; handed to the SDK path (fallbacks): "
        f"{fallbacks}; sent by the public SDK path for a missing SDK part: {public}. The raw "
        "SDK keeps its stock `httpx2` "
        "transport (as users run it). CPU per scheduler "
        f"poll / raw SDK call: **{raw.per_cpu_s / sched.per_cpu_s:.2f}**."
    )
    report.add()
