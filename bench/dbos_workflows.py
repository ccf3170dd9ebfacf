"""Bridged MCP task calls inside DBOS workflows (``bridge.integrations.dbos``).

    python -m bench.dbos_workflows [--quick] [--calls N] [--handles N] [--out FILE]

1. One task call per workflow, run one after the other, alternating: the bridged call
   (``call_tool``: a send step, then a durable ``DBOS.sleep`` of the server's
   ``pollIntervalMs`` and a poll step per ``tasks/get``, every state in the ledger) against
   the same MCP work as one plain DBOS step (the way pydantic-ai runs an MCP call: the raw
   official SDK client, the task created and polled at the same interval inside the step,
   nothing recorded between). Wall and process CPU per workflow.
2. ``--handles`` workflows at once, each with one open task handle (the task runs longer than
   the measurement): polls per second each handle sustains (its polls in the window, first
   to last) against the demand (handles / the mean jittered interval), and the lateness of
   each poll when its ``tasks/get`` left (a poll step's first: against the end of its durable
   sleep; the bench wraps ``DBOS.sleep_async``, the poll step and ``tasks/get`` to time them).

Both on SQLite (the ledger and DBOS's system database, two files), against
``bench/task_tool_server.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
from dbos import DBOS, DBOSConfig, SetWorkflowID
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bench.common import Report, machine, median, percentile, provenance
from bench.raw_task_calls import call_until_terminal
from bridge import Bridge, BridgeSettings, McpServerConfig, SchedulerConfig
from bridge._mcp.polling import scheduler as scheduler_module
from bridge._mcp.wire.extension import TasksClientExtension
from bridge._mcp.wire.shapes import CreateTaskResult, DetailedTask, GetTaskRequest, TaskIdParams
from bridge.integrations.dbos import _steps, attach, attached, call_tool
from bridge.integrations.dbos._attach import Attached
from tests.support.postgres import ThrowawayPostgres, fresh_database
from tests.support.processes import ServerProcess

REPO = Path(__file__).resolve().parents[1]
PRINCIPAL = "bench"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
_session: Any = None  # the plain step's SDK session (steps take plain arguments only)


# Instrumentation (bench only): when each workflow's durable sleep is due to end, and how
# late the poll step after it starts; the polls a step makes after waiting in process are
# timed by the bridge's own poll figures (the scheduler's lateness list, due time given).
_due_s: dict[str, float] = {}
# (when a poll step started, its lateness in ms)
_polls: list[tuple[float, float]] = []
_steps_done: list[float] = []  # when each poll step returned (a checkpoint)
_sent: list[float] = []  # when each handle was recorded (the send step takes it over)
_sleep = DBOS.sleep_async
_poll = _steps.poll
_take = Attached.take


async def _timed_sleep(seconds: float) -> None:
    if DBOS.workflow_id is not None:
        _due_s[DBOS.workflow_id] = time.time() + seconds
    await _sleep(seconds)


# The first tasks/get of each poll step: (when it left, how late against the sleep's end).
_first_sent: list[tuple[float, float]] = []
_first_due: dict[str, float] = {}


async def _timed_poll(*args: Any) -> Any:
    due = _due_s.pop(DBOS.workflow_id or "", None)
    now = time.time()
    if due is not None:  # counted when it starts: a step may poll on past the window's end
        _polls.append((now, (now - due) * 1000))
        _first_due[DBOS.workflow_id or ""] = due
    polled = await _poll(*args)
    _steps_done.append(time.time())
    return polled


def _timed_take(self: Attached, task_ref: str) -> None:
    _take(self, task_ref)
    _sent.append(time.time())


# When each handle's tasks/get left (the interval between two polls of one handle, start to
# start, against the server's pollIntervalMs).
_sent_at: dict[str, list[float]] = {}
_fetch = scheduler_module.fetch_task


async def _timed_fetch(connection: Any, task: Any) -> Any:
    now = time.time()
    _sent_at.setdefault(task.ref, []).append(now)
    due = _first_due.pop(DBOS.workflow_id or "", None)
    if due is not None:
        _first_sent.append((now, (now - due) * 1000))
    return await _fetch(connection, task)


scheduler_module.fetch_task = _timed_fetch
DBOS.sleep_async = _timed_sleep  # type: ignore[method-assign]
_steps.poll = _timed_poll
Attached.take = _timed_take  # type: ignore[method-assign]


@DBOS.workflow(name="bench.bridged")
async def bridged(key: str, seconds: float) -> str:
    outcome = await call_tool("work", "work", {"key": key, "seconds": seconds})
    return outcome.text()


@DBOS.step(name="bench.plain_mcp_call")
async def plain_mcp_call(key: str, seconds: float) -> str:
    """The whole MCP call in one step, as a framework without task handles runs it (on a
    session kept open across calls, as an agent's MCP toolset keeps it)."""
    assert _session is not None
    return await call_until_terminal(_session, key, seconds)


@DBOS.step(name="bench.raw_create")
async def raw_create(key: str, seconds: float) -> tuple[str, int]:
    created = await _session.call_tool("work", {"key": key, "seconds": seconds}, allow_claimed=True)
    assert isinstance(created, CreateTaskResult), created
    return created.task_id, created.poll_interval_ms or 1000


@DBOS.step(name="bench.raw_get")
async def raw_get(task_id: str) -> tuple[str, int | None, Any]:
    request = GetTaskRequest(params=TaskIdParams(task_id=task_id))
    reply = await _session.send_request(request, DetailedTask)
    return reply.status, reply.poll_interval_ms, reply.result


@DBOS.workflow(name="bench.raw_durable")
async def raw_durable(key: str, seconds: float) -> str:
    """DBOS's own durable polling of the raw SDK, no ledger: what DBOS's checkpoints cost."""
    task_id, interval = await raw_create(key, seconds)
    status, result = "working", None
    while status not in TERMINAL:
        await DBOS.sleep_async(interval / 1000)
        status, server_ms, result = await raw_get(task_id)
        interval = server_ms or interval
    assert result is not None
    return str(result["content"][0]["text"])


@DBOS.workflow(name="bench.plain")
async def plain(key: str, seconds: float) -> str:
    return await plain_mcp_call(key, seconds)


async def one_by_one(calls: int, seconds: float, report: Report) -> None:
    variants = {"plain": plain, "raw_durable": raw_durable, "bridged": bridged}
    walls: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    for n in range(calls + 2):  # the first two of each warm up, not counted
        for name, workflow in variants.items():
            cpu0, wall0 = time.process_time(), time.perf_counter()
            text = await workflow(f"{name}-{n}", seconds)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            assert text == f"done {name}-{n}", text
            if n >= 2:
                walls[name].append(wall)
                cpus[name].append(cpu)
    report.add(
        f"## 13. DBOS: a task call in a workflow, bridged vs a plain DBOS step ({calls} each)"
    )
    report.add("")
    report.add(
        f"Each workflow makes one `work` call: a task of {seconds:.2f} s on "
        "`bench/task_tool_server.py`, which asks for polls every "
        f"{POLL_MS} ms. Alternating, one at a time, one process; ledger and DBOS system "
        "database: SQLite files. CPU: the whole process (DBOS's threads included)."
    )
    report.add("")
    report.add(
        "Beside them, the raw SDK polled by DBOS itself (a step per `tasks/get`, a durable "
        "sleep between, no ledger): what DBOS's own checkpoints add, before the bridge."
    )
    report.add("")
    report.add(
        "| per workflow (median) | plain step | DBOS-polled raw SDK | bridged "
        "| **bridged / plain** | bridged / DBOS-polled |"
    )
    report.add("|---|---|---|---|---|---|")
    for label, data in (("wall", walls), ("CPU", cpus)):
        p, r, b = (median(data[name]) for name in variants)
        report.add(
            f"| {label} | {p * 1000:.1f} ms | {r * 1000:.1f} ms | {b * 1000:.1f} ms "
            f"| **{b / p:.2f}** | {b / r:.2f} |"
        )
    report.add("")


async def many_open(
    handles: int, interval_ms: int, window_s: float, where: str, report: Report
) -> None:
    run_id = f"open-{time.time_ns()}"
    started = time.time()
    _polls.clear()
    _first_sent.clear()
    _first_due.clear()
    _sent.clear()
    _steps_done.clear()
    _sent_at.clear()
    stats = attached().bridge._services.requester.scheduler.stats
    stats.keep_lateness = True
    stats.lateness.clear()
    ids = [f"{run_id}-{n}" for n in range(handles)]

    async def start(workflow_id: str) -> None:
        with SetWorkflowID(workflow_id):
            await DBOS.start_workflow_async(bridged, workflow_id, 3600.0)

    async with anyio.create_task_group() as starting:
        for workflow_id in ids:
            starting.start_soon(start, workflow_id)
    spread_s = time.time() - started
    with anyio.fail_after(600):  # every handle recorded: from here on, the steady state
        while len(_sent) < handles:
            await anyio.sleep(0.1)
    steady = time.time()
    cpu0 = time.process_time()
    sent0 = stats.polls
    await anyio.sleep(window_s)
    cpu = time.process_time() - cpu0
    sent = stats.polls - sent0  # every tasks/get this process sent in the window
    ended = time.time()
    after_sleeps = [late for at, late in _polls if steady <= at < ended]
    first_sent = [late for at, late in _first_sent if steady <= at < ended]
    in_step = [
        late for due, late, _ in stats.lateness if steady * 1000 <= due + late < ended * 1000
    ]
    checkpoints = len([at for at in _steps_done if steady <= at < ended])
    gaps: list[float] = []
    sustained = 0.0  # each handle's own rate in the window: its polls, first to last
    for sent_at in _sent_at.values():
        inside = [at for at in sent_at if steady <= at < ended]
        gaps += [(b - a) * 1000 for a, b in pairwise(inside)]
        if len(inside) > 1:
            sustained += (len(inside) - 1) / (inside[-1] - inside[0])
    for workflow_id in ids:  # the tasks outlive the run: stop their workflows
        await DBOS.cancel_workflow_async(workflow_id)
    measured = ended - steady
    # Each poll's lateness when its tasks/get left: a step's first poll against the end of
    # the durable sleep before it, the later ones against their due time in the step.
    lateness = first_sent + [float(ms) for ms in in_step]
    # Each interval is stretched by a random jitter (0 to SchedulerConfig.jitter), as the
    # bridge's own scheduler does: the demand is the handles over the mean interval.
    jitter = SchedulerConfig().jitter
    demand = handles / (interval_ms / 1000 * (1 + jitter / 2))
    report.add(f"## 14. DBOS: {handles} open handles in concurrent workflows")
    report.add("")
    report.add(
        f"{handles} workflows started at once ({spread_s:.1f} s to start them; every handle "
        f"recorded {steady - started:.1f} s after the first start), each waiting on a task "
        f"that outlives the run; `pollIntervalMs` {interval_ms}: demand {demand:.1f} polls/s "
        f"({handles / (interval_ms / 1000):.0f}/s before a jitter of up to {jitter:.0%}). "
        f"Measured over {measured:.1f} s once every handle was recorded; ledger and DBOS "
        f"system database on {where}; `poll_window_s` {attached().poll_window_s:.0f}; "
        f"{attached().pacing.per_server_concurrency} polls under way at once at most "
        "(`SchedulerConfig.per_server_concurrency`; default 16). "
        "A step polls an unchanged task at the interval in process until the window would "
        "pass, then checkpoints; the workflow sleeps durably and the next step polls. "
        "Lateness: when a poll's `tasks/get` left minus when it was due (a step's first "
        "poll: when the durable sleep before it was due to end)."
    )
    report.add("")
    report.add("| figure | value | against |")
    report.add("|---|---|---|")
    report.add(
        f"| polls/s sustained (each handle's polls in the window, first to last) "
        f"| {sustained:.1f} | demand {demand:.1f}/s |"
    )
    report.add(
        f"| polls (`tasks/get` sent) in the window | {sent} ({sent / measured:.1f}/s) "
        "| every handle's polls fall due within the same few seconds (they started "
        "together): this count is where the window's edges fall, not the rate |"
    )
    report.add(
        f"| interval between two polls of one handle, start to start, min / p50 / p90 "
        f"| {min(gaps, default=0):.0f} ms / {percentile(gaps, 50):.0f} ms / "
        f"{percentile(gaps, 90):.0f} ms ({len(gaps)} pairs) "
        f"| {interval_ms} ms, jittered to {interval_ms * (1 + jitter):.0f} ms |"
    )
    report.add(
        f"| lateness p50 / p99 / max | {percentile(lateness, 50):.0f} ms / "
        f"{percentile(lateness, 99):.0f} ms / {max(lateness, default=0):.0f} ms "
        f"| interval {interval_ms} ms |"
    )
    report.add(
        f"| first poll of a poll step: lateness when the step started / when its `tasks/get` "
        f"left, p50 | {percentile(after_sleeps, 50):.0f} ms / "
        f"{percentile(first_sent, 50):.0f} ms ({len(first_sent)} polls) | |"
    )
    report.add(
        f"| polls timed: first of a poll step / later in a step (the send step's included) "
        f"| {len(first_sent)} / {len(in_step)} | |"
    )
    report.add(f"| poll steps checkpointed | {checkpoints} ({checkpoints / measured:.0f}/s) | |")
    report.add(f"| process CPU | {cpu / measured:.2f} of one core | |")
    report.add("")


POLL_MS = 100  # part 1: the server's pollIntervalMs
TASK_S = 0.45  # part 1: how long each task runs


@contextmanager
def _postgres() -> Iterator[tuple[str, str] | None]:
    """Two fresh databases (the ledger, DBOS's system database) on a throwaway PostgreSQL, or
    None where its binaries are missing."""
    try:
        server = ThrowawayPostgres()
    except FileNotFoundError:
        yield None
        return
    server.start()
    try:
        with fresh_database(server.url()) as ledger, fresh_database(server.url()) as sysdb:
            yield ledger, sysdb
    finally:
        server.stop()


@asynccontextmanager
async def _worker(
    ledger: str,
    sysdb: str,
    url: str,
    *,
    sysdb_pool: int | None = None,
    per_server: int | None = None,
) -> AsyncIterator[None]:
    """This process as a DBOS worker with an attached bridge (``sysdb_pool``: DBOS's system
    database pool, 20 connections by default; ``per_server``: polls under way at once on the
    one server, ``SchedulerConfig.per_server_concurrency``)."""
    scheduler = SchedulerConfig(floor_ms=20)
    if per_server is not None:
        scheduler = replace(scheduler, per_server_concurrency=per_server)
    settings = BridgeSettings(
        ledger_url=ledger,
        principals=[PRINCIPAL],
        mcp_servers=[McpServerConfig(name="work", url=url)],
        scheduler=scheduler,
        recover_on_start=False,
    )
    async with Bridge.open(settings) as bridge:
        attach(bridge, PRINCIPAL)
        config: DBOSConfig = {"name": "bench-dbos", "system_database_url": sysdb}
        if sysdb_pool is not None:
            config["sys_db_pool_size"] = sysdb_pool
        DBOS(config=config)
        DBOS.launch()
        try:
            yield
        finally:
            DBOS.destroy()


def _server(scratch: Path, name: str, poll_ms: int) -> ServerProcess:
    effects = str(scratch / f"{name}-effects.log")
    return ServerProcess(
        "bench.task_tool_server",
        args=["--effects-file", effects, "--poll-interval-ms", str(poll_ms)],
    )


async def bench_dbos(quick: bool, report: Report) -> None:
    """Sections 13-14 of ``python -m bench.run`` (its sizes: :func:`sizes`)."""
    args = sizes(
        argparse.Namespace(
            quick=quick,
            skip_calls=False,
            calls=None,
            handles=None,
            interval_ms=None,
            window_s=None,
            sysdb_pool=None,
            per_server=None,
        )
    )
    with tempfile.TemporaryDirectory() as scratch:
        await _sections(args, Path(scratch), report)


async def main_async(args: argparse.Namespace, scratch: Path) -> Report:
    report = Report("python -m bench.dbos_workflows" + (" --quick" if args.quick else ""))
    report.add(f"Machine: {machine()}. {provenance(REPO)}")
    report.add("")
    await _sections(args, scratch, report)
    return report


async def _sections(args: argparse.Namespace, scratch: Path, report: Report) -> None:
    if not args.skip_calls:
        await _calls(args, scratch, report)
    with _server(scratch, "many", args.interval_ms) as server, _postgres() as pg:
        ledger, sysdb = pg or (str(scratch / "ledger-2.db"), f"sqlite:///{scratch / 'sys-2.db'}")
        where = "PostgreSQL 15 (throwaway; both databases)" if pg else "SQLite (no PostgreSQL)"
        where += f"; DBOS's system database pool: {args.sysdb_pool} connections"
        per_server = args.per_server
        async with _worker(
            ledger, sysdb, server.url, sysdb_pool=args.sysdb_pool, per_server=per_server
        ):
            await many_open(args.handles, args.interval_ms, args.window_s, where, report)


async def _calls(args: argparse.Namespace, scratch: Path, report: Report) -> None:
    global _session
    with _server(scratch, "one", POLL_MS) as server:
        sysdb = f"sqlite:///{scratch / 'dbos-system.db'}"
        async with (
            create_mcp_http_client() as http,
            Client(
                streamable_http_client(server.url, http_client=http),
                extensions=[TasksClientExtension()],
            ) as client,
            _worker(str(scratch / "ledger.db"), sysdb, server.url),
        ):
            _session = client.session
            await one_by_one(args.calls, TASK_S, report)


def sizes(args: argparse.Namespace) -> argparse.Namespace:
    """The sizes not given: small with ``quick``. The open handles' interval keeps their
    demand within what one worker process polls on these 2-core machines (see the report)."""
    args.calls = args.calls or (3 if args.quick else 20)
    args.handles = args.handles or (20 if args.quick else 1000)
    args.interval_ms = args.interval_ms or (500 if args.quick else 15_000)
    # Four intervals: every handle's polls after the send step's, across a durable sleep and
    # inside a step, fall in the window.
    args.window_s = args.window_s or (3.0 if args.quick else 60.0)
    # DBOS's default pool (20) queues a thousand workflows' checkpoints; 64 keeps up here.
    args.sysdb_pool = args.sysdb_pool or (20 if args.quick else 64)
    # As section 18 (Temporal): the one server's polls may be under way 64 at once, not 16.
    args.per_server = args.per_server or (16 if args.quick else 64)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--calls", type=int, default=None)
    parser.add_argument("--handles", type=int, default=None)
    parser.add_argument("--interval-ms", type=int, default=None)
    parser.add_argument("--window-s", type=float, default=None)
    parser.add_argument("--sysdb-pool", type=int, default=None, help="DBOS sys_db_pool_size")
    parser.add_argument(
        "--per-server", type=int, default=None, help="SchedulerConfig.per_server_concurrency"
    )
    parser.add_argument("--skip-calls", action="store_true", help="only the open handles")
    parser.add_argument("--out", type=Path, default=None)
    args = sizes(parser.parse_args(argv))
    with tempfile.TemporaryDirectory() as scratch:
        report = anyio.run(main_async, args, Path(scratch))
    if args.out is not None:
        args.out.write_text("\n".join(report.lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
