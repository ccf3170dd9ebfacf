"""``Bridge.attention`` on a SQLite ledger of 1,000 runs: how long the operator's one query
takes when the ledger holds a realistic mix (most runs done; some waiting on input, some with
an unknown outcome, a lost task or an anomaly; some served runs gone silent).

Run alone: ``python -m bench.attention`` (or ``python -m bench.run --only attention``)."""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from pathlib import Path

import anyio

from bench.common import Report, percentile
from bridge import Bridge, BridgeSettings
from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import LostReason, OuterStatus, TaskStatus

P = "acme"
ENDPOINT = "http://127.0.0.1:9/mcp"
ASK = {
    "method": "elicitation/create",
    "params": {
        "message": "Approve?",
        "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}}},
    },
}


def _task(tenant: TenantLedger, run_ref: str, tool: str) -> str:
    op = tenant.calls.begin_dispatch(
        run_ref, server_endpoint=ENDPOINT, server_name="s", tool_name=tool, arguments={}
    )
    tenant.calls.mark_dispatch_sent(op.ref)
    task = tenant.calls.record_task_created(
        op.ref, task_id="t-" + secrets.token_hex(12), status=TaskStatus.WORKING, ttl_ms=60_000
    )
    return task.ref


def populate(tenant: TenantLedger, runs: int) -> dict[str, int]:
    """``runs`` served runs, each with one finished task; a share of them needing a person."""
    mix = {"input": 0, "unknown": 0, "lost": 0, "anomaly": 0}
    for n in range(runs):
        run = tenant.runs.open_run(
            "local:bench", response_id=f"resp_{n}", status=OuterStatus.IN_PROGRESS
        )
        done = _task(tenant, run.ref, "report")
        tenant.tasks.observe_task(
            done, TaskObservation(TaskStatus.COMPLETED, result={"content": []})
        )
        if n % 10 == 0:
            waiting = _task(tenant, run.ref, "approve")
            tenant.tasks.observe_task(
                waiting,
                TaskObservation(TaskStatus.INPUT_REQUIRED, input_requests={"ask": ASK}),
            )
            mix["input"] += 1
        if n % 20 == 1:
            op = tenant.calls.begin_dispatch(
                run.ref, server_endpoint=ENDPOINT, tool_name="charge", arguments={"n": n}
            )
            tenant.calls.mark_dispatch_sent(op.ref)
            tenant.calls.mark_dispatch_unknown(op.ref, "connection reset")
            mix["unknown"] += 1
        if n % 25 == 2:
            tenant.tasks.mark_task_lost(_task(tenant, run.ref, "chart"), LostReason.NOT_FOUND)
            mix["lost"] += 1
        if n % 50 == 3:
            tenant.tasks.observe_task(done, TaskObservation(TaskStatus.WORKING))  # a regression
            mix["anomaly"] += 1
        if n % 10 != 5:  # one run in ten stays in_progress, silent: orphaned
            tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)
    return mix


async def _measure(ledger: Ledger, rounds: int) -> tuple[list[float], list[float], int]:
    """Wall-clock and CPU milliseconds of each read (CPU: what the machine's load adds nothing
    to), and how many items one read returns."""
    bridge = Bridge(ledger, BridgeSettings(principals=[P], recover_on_start=False))
    items = await bridge.attention(P, orphan_after=0)  # warm, and the size of the answer
    times, cpu = [], []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.process_time()
        await bridge.attention(P, orphan_after=0)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return times, cpu, len(items)


async def bench_attention(quick: bool, report: Report) -> None:
    runs, rounds = (200, 50) if quick else (1_000, 300)
    with tempfile.TemporaryDirectory(prefix="bench-attention-") as folder:
        ledger = Ledger.open(Path(folder) / "ledger.db")
        try:
            mix = populate(ledger.for_principal(P), runs)
            times, cpu, size = await _measure(ledger, rounds)
        finally:
            ledger.close()
    report.add(f"## 16. `Bridge.attention` on {runs:,} runs (SQLite)")
    report.add()
    report.add(
        f"{runs:,} served runs, each with a finished task; {mix['input']} wait on an input, "
        f"{mix['unknown']} hold a call of unknown outcome, {mix['lost']} a lost task, "
        f"{mix['anomaly']} an anomaly; one in ten is still `in_progress` and silent "
        f"(orphaned: `orphan_after=0`). The answer holds {size} items; {rounds} reads, "
        "one after another."
    )
    report.add()
    report.add("| | p50 | p99 | max | goal |")
    report.add("|---|---|---|---|---|")
    report.add(
        f"| wall clock | {percentile(times, 50):.1f} ms | **{percentile(times, 99):.1f} ms** | "
        f"{max(times):.1f} ms | p99 under 50 ms |"
    )
    report.add(
        f"| CPU of the process | {percentile(cpu, 50):.1f} ms | {percentile(cpu, 99):.1f} ms | "
        f"{max(cpu):.1f} ms | |"
    )
    report.add()
    report.add(
        "Load average during the run: "
        f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1 / 5 / 15 min) on 2 cores."
    )
    report.add()


def main() -> None:
    anyio.run(bench_attention, False, Report("python -m bench.attention"))


if __name__ == "__main__":
    main()
