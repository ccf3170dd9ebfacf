"""Two replicas on one PostgreSQL ledger, one killed holding a task (guides/run-replicas.md).

Replica "replica-b" runs in this process. Replica "replica-a" runs in a child process: it
starts a long report task (detached, so the handle is leased to it and watched by it) and is
killed with SIGKILL. Replica B takes the handle over once A's membership has lapsed (within one
lease period plus a claim round), polls it to its terminal status, and B's subscriber sees the
run's whole event log in order with no gap, whoever wrote each event.

    python docs/examples/replicas_take_over.py

Environment: BRIDGE_EXAMPLE_PG_URL (an empty PostgreSQL database), BRIDGE_EXAMPLE_REPORTS_URL
and BRIDGE_EXAMPLE_TOKEN (the example report MCP server and its bearer token).
"""

from __future__ import annotations

# --8<-- [start:imports]
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import anyio

from bridge import Bridge, BridgeSettings, McpServerConfig, ReplicaConfig, TaskPending, WaitMode
# --8<-- [end:imports]

PG_URL = os.environ["BRIDGE_EXAMPLE_PG_URL"]
REPORTS_URL = os.environ["BRIDGE_EXAMPLE_REPORTS_URL"]
vault = {"reports": os.environ["BRIDGE_EXAMPLE_TOKEN"]}  # credential_ref -> secret
LEASE_MS = 3_000
TAKE_OVER_DEADLINE_S = 30  # far above one lease period: only a broken take-over misses it


async def run_replica(replica_id: str, work: Callable[[Bridge], Awaitable[None]]) -> None:
    # --8<-- [start:open]
    async with Bridge.open(
        BridgeSettings(
            ledger_url=PG_URL,
            principals=["acme"],
            mcp_servers=[
                McpServerConfig(name="reports", url=REPORTS_URL, credential_ref="reports")
            ],
            credentials=vault.get,
            replica=ReplicaConfig(replica_id=replica_id, lease_ms=LEASE_MS),
        )
    ) as bridge:
        await work(bridge)  # the same API as a single bridge
    # --8<-- [end:open]


async def start_a_task_then_hang(bridge: Bridge) -> None:
    """Replica A: a handle leased to it, then nothing until it is killed."""
    run = await bridge.register_served_run(
        "acme", response_id="resp_replicas", session_id="hsess_replicas", harness_id="chrn_1"
    )
    args = {"quarter": "Q3", "sections": 4, "seconds_per_section": 0.5}
    step = await run.call_tool("reports", "generate_report", args, wait=WaitMode.DETACH)
    if not isinstance(step, TaskPending):
        sys.exit(f"replica A expected a pending task, got {step!r}")
    print(run.ref, step.task.ref, flush=True)
    await anyio.sleep_forever()


async def take_over(bridge: Bridge) -> None:
    """Replica B: start replica A, kill it, and watch its task finish here."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--replica-a"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = await anyio.to_thread.run_sync(child.stdout.readline)
        if not line:
            sys.exit(f"replica A exited {child.wait()} before creating its task")
        run_ref, task_ref = line.split()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    killed_at = time.monotonic()
    print(f"replica A killed holding {task_ref}")
    seen: list[tuple[int, str]] = []
    with anyio.fail_after(TAKE_OVER_DEADLINE_S):
        async for event in bridge.run("acme", run_ref).subscribe(after_seq=0):
            seen.append((event.seq, event.type))
            if event.type == "task.terminal":
                if event.status != "completed":
                    sys.exit(f"the task ended {event.status}")
                break
    print(f"replica B recorded the terminal status {time.monotonic() - killed_at:.1f} s later")
    if [seq for seq, _ in seen] != list(range(1, len(seen) + 1)):
        sys.exit(f"the subscriber saw a gap or a repeat: {seen}")
    if ("task.created" not in [t for _, t in seen]) or bridge.settings.replica is None:
        sys.exit(f"expected A's task.created in B's view of the log: {seen}")
    print("events seen on replica B:", ", ".join(f"{seq} {kind}" for seq, kind in seen))


if __name__ == "__main__":
    if sys.argv[1:] == ["--replica-a"]:
        anyio.run(run_replica, "replica-a", start_a_task_then_hang)
    else:
        anyio.run(run_replica, "replica-b", take_over)
