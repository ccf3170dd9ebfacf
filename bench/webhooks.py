"""Webhook delivery latency: from the commit of an attention item to a receiver on loopback,
while 200 runs are active.

    python -m bench.webhooks [--quick]     (also section ``webhooks`` of ``python -m bench.run``)

A bridge on SQLite (WAL) serves N runs, each with a report task open on the example task
server (``bridge.testing.server``) and polled every ``POLL_FLOOR_MS`` (``floor_ms``);
meanwhile every run records attention items (anomalies) at random moments over the window,
through the bridge's ledger runner. The bridge's deliverer pushes each to a receiver on
127.0.0.1 in a process of its own that verifies every signature with ``standardwebhooks``
(``bench/webhook_receiver.py``). Latency: the receiver's arrival time minus the event's commit
stamp (``at_ms``, taken inside the write, just before its commit: the figure includes it).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import httpx

from bench.common import Report, machine, percentile, provenance
from bench.webhook_receiver import SECRET_ENV
from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode, WebhookEndpoint
from bridge._config import SchedulerConfig
from tests.support.processes import ServerProcess
from tests.support.webhooks import new_secret

REPO = Path(__file__).resolve().parents[1]
GOAL_P99_S = 1.0
# The example server asks for a poll every 200 ms: 1000 polls/s for 200 handles would measure
# the scheduler (section 3), not the deliverer. 40 polls/s keeps every run active.
POLL_FLOOR_MS = 5_000


async def bench_webhooks(quick: bool, report: Report) -> None:
    runs = 20 if quick else 200
    items_per_run = 2
    window_s = 5.0 if quick else 20.0
    secret = new_secret()
    with (
        tempfile.TemporaryDirectory() as scratch,
        ServerProcess("bridge.testing.server", env={"BRIDGE_MCP_TOKEN": ""}) as mcp,
        ServerProcess("bench.webhook_receiver", env={SECRET_ENV: secret}) as receiver,
        httpx.Client(timeout=30) as http,
    ):
        hook_url = f"http://127.0.0.1:{receiver.port}/hook"

        def received() -> dict[str, float]:
            answer = http.get(f"http://127.0.0.1:{receiver.port}/received")
            return {str(k): float(v) for k, v in answer.json().items()}

        settings = BridgeSettings(
            ledger_url=Path(scratch) / "ledger.db",
            principals=["bench"],
            mcp_servers=[McpServerConfig(name="reports", url=mcp.url)],
            scheduler=SchedulerConfig(floor_ms=POLL_FLOOR_MS),
            webhooks=[WebhookEndpoint(principal="bench", url=hook_url, secret_ref="hook")],
            credentials=lambda ref: secret if ref == "hook" else None,
            recover_on_start=False,
        )
        async with Bridge.open(settings) as bridge:
            handles = []
            for n in range(runs):
                run = await bridge.register_served_run(
                    "bench", response_id=f"resp_{n}", session_id=f"hsess{n}", harness_id="chrn"
                )
                arguments = {"quarter": "Q3", "sections": 12, "seconds_per_section": 10.0}
                await run.call_tool("reports", "generate_report", arguments, wait=WaitMode.DETACH)
                handles.append(run)
            tenant = bridge._ledger.for_principal("bench")
            open_tasks = len(await bridge.read("bench", lambda r: r.tasks(open_only=True)))
            committed: dict[str, float] = {}

            async def emit(run_ref: str, delay: float) -> None:
                await anyio.sleep(delay)
                event = await bridge._db(tenant.runs.record_anomaly, run_ref, "bench", "item")
                committed[f"msg_{run_ref}_{event.seq}"] = event.at_ms / 1000

            started = time.monotonic()
            cpu_started = time.process_time()
            async with anyio.create_task_group() as tg:
                for run in handles:
                    for _ in range(items_per_run):
                        tg.start_soon(emit, run.ref, random.uniform(0, window_s))
            total = len(committed)
            with anyio.fail_after(120):
                while len(set(await anyio.to_thread.run_sync(received)) & set(committed)) < total:
                    await anyio.sleep(0.1)
            elapsed = time.monotonic() - started
            cpu = time.process_time() - cpu_started
            polls = bridge._requester.scheduler.stats.polls
            arrived = received()
    latencies = [arrived[item] - at for item, at in committed.items()]
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    report.add(f"## 15. Webhook delivery latency with {runs} active runs")
    report.add()
    report.add(
        f"{runs} served runs on SQLite (WAL), each with a report task open on "
        f"`bridge.testing.server` ({open_tasks} open handles, polled every "
        f"{POLL_FLOOR_MS / 1000:.0f} s: {polls} polls in all); {total} attention items "
        f"(anomalies) committed at random over {window_s:.0f} s, each pushed by the deliverer "
        "to a receiver on 127.0.0.1 in a process of its own that verifies its signature "
        "(`standardwebhooks`). Latency: arrival at the receiver minus the event's commit stamp. "
        "The bridge's process (runs, polls, deliverer) used "
        f"{cpu:.1f} s of CPU over the {elapsed:.1f} s of the window; "
        f"load average {os.getloadavg()[0]:.2f} at the end."
    )
    report.add()
    report.add("| items | delivered | p50 | p99 | max | goal p99 |")
    report.add("|---|---|---|---|---|---|")
    report.add(
        f"| {total} | {len(set(arrived) & set(committed))} (in {elapsed:.1f} s) | "
        f"{p50 * 1000:.1f} ms | **{p99 * 1000:.1f} ms** | {max(latencies) * 1000:.1f} ms | "
        f"< {GOAL_P99_S * 1000:.0f} ms |"
    )
    report.add()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    report = Report("python -m bench.webhooks")
    report.add(f"Machine: {machine()}.")
    report.add(provenance(REPO))
    report.add()
    anyio.run(bench_webhooks, args.quick, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
