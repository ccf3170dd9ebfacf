"""The four situations of the operator's trial (docs/trials/operator-loop.md), set up on one
ledger with real servers and real processes:

* a payment waiting on a person (``approve_payment`` of ``bridge.testing.server``);
* a task its server lost (``wait_forever`` of ``tests.servers.tasks_server``, then that server
  restarted: it no longer knows the task, ``-32602``);
* a call of unknown outcome (``place_order`` of ``tests.servers.orders_server`` with its reply
  cut off after the order was placed: it did run);
* an orphaned run: a served run whose harness process was SIGKILLed while its task worked.

:func:`stage` is the harness that sets up the first three and then ends (as a harness process
does between requests); ``python -m tests.support.operator_trial orphan --db DB --mcp-config F`` is
the harness that gets killed. ``python -m tests.support.operator_trial stage --db DB`` starts
the servers itself, stages everything, prints the references as JSON and keeps the servers up
until interrupted (what the trial in the docs ran).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from fastmcp import Client

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode
from tests.support.processes import REPO_ROOT, ServerProcess, running_together

P = "acme"
READY = "ready"


@dataclass(frozen=True, slots=True)
class Staged:
    """What the trial set up: the runs and what to act on in each."""

    pay_run: str
    input_ref: str
    job_run: str
    lost_task: str
    order_run: str
    unknown_op: str
    orphan_run: str
    orphan_task: str


@contextmanager
def trial_servers(effects_dir: Path) -> Iterator[dict[str, ServerProcess]]:
    """``payments`` (the package's example server), ``jobs`` (the tasks server) and
    ``orders`` (the orders server, its effects in ``effects_dir/orders.log``)."""
    procs = {
        "payments": ServerProcess("bridge.testing.server"),
        "jobs": ServerProcess("tests.servers.tasks_server"),
        "orders": ServerProcess(
            "tests.servers.orders_server",
            args=["--effects-file", str(effects_dir / "orders.log")],
        ),
    }
    with running_together(procs):
        yield procs


def mcp_config(procs: dict[str, ServerProcess]) -> dict[str, object]:
    """The ``--mcp-config`` file's content for the trial's servers."""
    return {"mcpServers": [{"name": name, "url": proc.url} for name, proc in procs.items()]}


def _settings(db: str, procs: dict[str, ServerProcess]) -> BridgeSettings:
    servers = [McpServerConfig(name=n, url=p.url, request_timeout_s=5.0) for n, p in procs.items()]
    return BridgeSettings(ledger_url=db, principals=[P], mcp_servers=servers)


async def stage(db: str, procs: dict[str, ServerProcess], timeout: float = 60.0) -> Staged:
    """Set up the four situations (the orphan's harness is started and SIGKILLed here)."""
    async with Bridge.open(_settings(db, procs)) as bridge:
        pay = await bridge.register_served_run(
            P, response_id="resp_trial_pay", session_id="hsess_trial", harness_id="chrn_trial"
        )
        await pay.call_tool(
            "payments", "approve_payment", {"amount": 120, "payee": "ACME GmbH"},
            wait=WaitMode.DETACH, operation_id="trial/pay-120",
        )  # fmt: skip
        async with asyncio.timeout(timeout):
            while not (asked := await pay.pending_inputs()):
                await asyncio.sleep(0.05)
        job = await bridge.register_served_run(
            P, response_id="resp_trial_job", session_id="hsess_trial", harness_id="chrn_trial"
        )
        await job.call_tool(
            "jobs", "wait_forever", {"seconds": 600},
            wait=WaitMode.DETACH, operation_id="trial/job",
        )  # fmt: skip
        (job_task,) = await job.tasks()
        procs["jobs"].restart()  # its tasks were in memory: the next poll learns it is lost
        (lost,) = await job.wait_for([job_task.ref], timeout=timeout)
        order = await bridge.register_served_run(
            P, response_id="resp_trial_order", session_id="hsess_trial", harness_id="chrn_trial"
        )
        async with Client(procs["orders"].url) as client:
            await client.call_tool("drop_replies", {"count": 1})
        await order.call_tool(
            "orders", "place_order", {"item": "chair"}, operation_id="trial/order-chair"
        )
        dispatch = await order.operation("trial/order-chair")
        assert dispatch is not None and dispatch.state.value == "unknown", dispatch
    config = Path(tempfile.mkdtemp()) / "harness-mcp.json"  # the harnesses' one config
    config.write_text(json.dumps(mcp_config(procs)))
    orphan_run, orphan_task = _killed_harness(db, config, timeout)
    return Staged(
        pay_run=pay.ref,
        input_ref=asked[0].input_ref,
        job_run=job.ref,
        lost_task=lost.ref,
        order_run=order.ref,
        unknown_op=dispatch.ref,
        orphan_run=orphan_run,
        orphan_task=orphan_task,
    )


def _killed_harness(db: str, config: Path, timeout: float) -> tuple[str, str]:
    """Start the orphan's harness, wait until its task works, then SIGKILL it."""
    command = [sys.executable, "-m", "tests.support.operator_trial", "orphan", "--db", db]
    proc = subprocess.Popen(
        [*command, "--mcp-config", str(config)], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the harness reports, or dies
        ready, run_ref, task_ref = line.split()
        assert ready == READY, line
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout)
    return run_ref, task_ref


async def _orphan(db: str, config: Path) -> None:
    servers = json.loads(config.read_text())["mcpServers"]
    settings = BridgeSettings(
        ledger_url=db,
        principals=[P],
        mcp_servers=[McpServerConfig(name=s["name"], url=s["url"]) for s in servers],
    )
    async with Bridge.open(settings) as bridge:
        run = await bridge.register_served_run(
            P, response_id="resp_trial_orphan", session_id="hsess_dead", harness_id="chrn_dead"
        )
        await run.call_tool(
            "jobs", "wait_forever", {"seconds": 600},
            wait=WaitMode.DETACH, operation_id="trial/orphan-job",
        )  # fmt: skip
        (task,) = await run.tasks()
        print(READY, run.ref, task.ref, flush=True)
        await asyncio.sleep(3600)  # until killed


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["stage", "orphan"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--mcp-config", help="the servers the orphan's harness knows")
    parser.add_argument("--out", help="where stage writes the references and mcp config")
    args = parser.parse_args(argv)
    if args.what == "orphan":
        asyncio.run(_orphan(args.db, Path(args.mcp_config)))
        return
    out = Path(args.out or Path(args.db).parent)
    with trial_servers(out) as procs:
        staged = asyncio.run(stage(args.db, procs))
        (out / "mcp.json").write_text(json.dumps(mcp_config(procs), indent=2))
        print(json.dumps(asdict(staged), indent=2), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()  # the servers stay up for the operator


if __name__ == "__main__":
    main()
