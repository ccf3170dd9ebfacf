"""A Temporal worker process on the bridge (for SIGKILL tests and the benchmark).

    python -m tests.support.temporal_worker --target HOST:PORT --task-queue Q --db LEDGER \
        --mcp-url URL [--crash STEP] [--replica ID]

It opens one bridge (principal ``acme``, the MCP server as ``tasks``, recovering what is open
on start) and runs the test workflows and the bridge's activities, printing ``READY`` once it
polls. ``--crash``: the process SIGKILLs itself at that write-ahead step of a bridged call
(:mod:`tests.support.crash_driver`'s points). ``--replica``: join the ledger's replicas under
that id, with a short lease (a PostgreSQL ledger), so a killed worker's handles are taken over
within seconds.
"""

import argparse

import anyio
from temporalio.client import Client
from temporalio.worker import Worker

from bridge import Bridge, BridgeSettings, McpServerConfig, ReplicaConfig
from bridge.integrations.temporal import BridgeActivities
from tests.support.bridging import FAST
from tests.support.crash_driver import CRASH_POINTS, _inject
from tests.support.temporal_workflows import BridgedCallWorkflow, TwoCallsWorkflow

PRINCIPAL = "acme"


async def main(args: argparse.Namespace) -> None:
    settings = BridgeSettings(
        ledger_url=args.db,
        principals=[PRINCIPAL],
        mcp_servers=[McpServerConfig(name="tasks", url=args.mcp_url)],
        scheduler=FAST,
        replica=ReplicaConfig(args.replica, lease_ms=3_000, claim_every_ms=200)
        if args.replica
        else None,
    )
    client = await Client.connect(args.target)
    async with Bridge.open(settings) as bridge:
        acts = BridgeActivities(bridge, PRINCIPAL)
        worker = Worker(
            client,
            task_queue=args.task_queue,
            workflows=[BridgedCallWorkflow, TwoCallsWorkflow],
            activities=acts.activities(),
        )
        async with worker:
            print("READY", flush=True)
            await anyio.sleep_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ("--target", "--task-queue", "--db", "--mcp-url"):
        parser.add_argument(name, required=True)
    parser.add_argument("--crash", choices=sorted(CRASH_POINTS))
    parser.add_argument("--replica")
    parsed = parser.parse_args()
    if parsed.crash:
        _inject(parsed.crash)
    anyio.run(main, parsed)
