"""One bridge replica as its own process, for the scale-out test and benchmarks.

A harness replica reduced to what leased polling needs: a :class:`bridge.Bridge` in leased mode
on a shared ledger, polling one MCP server, plus ``GET /stats`` on 127.0.0.1 so a driver can
synchronise on what the replica did (handles watched, polls, leases lost) instead of sleeping,
and ``POST /hold`` / ``POST /release`` to pause and resume its polling, so that a benchmark can
alternate measurement windows of this replica and of the raw SDK on the same machine.
``POST /window`` starts a lateness window (every poll's lateness kept from then on) and
``GET /window`` summarises it (p50/p99/max), for a steady-state measurement of many handles.
It presents its replica id as its bearer token, so the MCP server can tell replicas apart.

``python -m bench.replica_process --port P --db URL --mcp URL --replica-id ID [options]``;
SIGTERM stops it cleanly (its leases handed over at once), SIGKILL is the crash case.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bridge import Bridge, BridgeSettings, ReplicaConfig
from bridge._config import McpServerConfig, SchedulerConfig
from bridge._ledger.store import Ledger
from harness_examples.port_report import (
    add_port_arguments,
    check_port_arguments,
    listening_socket,
    uvicorn_server,
)

STARTED = time.monotonic()


def _memory_kb() -> dict[str, int]:
    """Resident set size now and its peak (``VmRSS``/``VmHWM`` of ``/proc/self/status``)."""
    fields = {"VmRSS:": "rss_kb", "VmHWM:": "peak_rss_kb"}
    found: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            parts = line.split()
            if parts and parts[0] in fields:
                found[fields[parts[0]]] = int(parts[1])
    return found


def _lateness_summary(lateness: list[tuple[int, int, str]]) -> dict[str, Any]:
    values = sorted(late for _, late, _ in lateness)
    if not values:
        return {"polls": 0, "handles": 0}

    def at(q: float) -> int:
        return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]

    return {
        "polls": len(values),
        "handles": len({ref for _, _, ref in lateness}),
        "p50_ms": at(50),
        "p99_ms": at(99),
        "max_ms": values[-1],
    }


def _clocks(polls: int) -> dict[str, float]:
    """A poll count with the wall and CPU clocks it was read at (for rates and CPU per poll)."""
    return {"polls": polls, "at": time.monotonic(), "cpu": time.process_time()}


def _stats(bridge: Bridge, recovered_at: list[float], bridge_started: float) -> dict[str, Any]:
    scheduler = bridge._requester.scheduler
    replica = bridge._replica
    assert replica is not None
    member = replica.membership
    return {
        "replica": str(member) if member is not None else None,
        "can_act": replica.can_act(),
        "watched": scheduler.watched_count,
        **_clocks(scheduler.stats.polls),
        "writes": scheduler.stats.writes,
        "failures": scheduler.stats.failures,
        "leases_lost": scheduler.stats.leases_lost,
        "dropped_on_lapse": scheduler.stats.dropped_on_lapse,
        "claimed_tasks": replica.claimed_tasks,
        "process_started": STARTED,
        "bridge_started": bridge_started,
        "recovered_at": recovered_at[0] if recovered_at else None,
        "recovered_tasks": bridge.last_recovery.tasks_watched if bridge.last_recovery else None,
        **_memory_kb(),
    }


async def serve(args: argparse.Namespace) -> None:
    replica = ReplicaConfig(
        replica_id=args.replica_id,
        lease_ms=args.lease_ms,
        claim_every_ms=args.claim_every_ms,
        claim_batch=args.claim_batch,
        max_tasks=args.max_tasks,
        share_evenly=args.share_evenly,
    )
    scheduler = SchedulerConfig(
        floor_ms=args.floor_ms,
        ceiling_ms=args.ceiling_ms,
        max_in_flight=args.max_in_flight,
        per_server_concurrency=args.max_in_flight,
        jitter=args.jitter,
    )
    server = McpServerConfig(name="fast", url=args.mcp, credential_ref="replica")
    recovered_at: list[float] = []
    bridge_box: list[Bridge] = []
    started_box: list[float] = []

    async def stats(_: Request) -> JSONResponse:
        if not bridge_box:
            return JSONResponse({"replica": None, "process_started": STARTED}, status_code=503)
        return JSONResponse(_stats(bridge_box[0], recovered_at, started_box[0]))

    async def hold(_: Request) -> JSONResponse:
        """Start no more polls; answer once those in flight have finished."""
        if not bridge_box:
            return JSONResponse({}, status_code=503)
        scheduler = bridge_box[0]._requester.scheduler
        scheduler.hold()
        held_at = _clocks(scheduler.stats.polls)
        while scheduler.in_flight:
            await anyio.sleep(0.005)
        return JSONResponse(held_at)

    async def release(_: Request) -> JSONResponse:
        if not bridge_box:
            return JSONResponse({}, status_code=503)
        scheduler = bridge_box[0]._requester.scheduler
        released_at = _clocks(scheduler.stats.polls)
        scheduler.release()
        return JSONResponse(released_at)

    async def window(request: Request) -> JSONResponse:
        """POST: keep every poll's lateness from now on; GET: summarise what was kept."""
        if not bridge_box:
            return JSONResponse({}, status_code=503)
        stats = bridge_box[0]._requester.scheduler.stats
        if request.method == "POST":
            stats.lateness = []
            stats.keep_lateness = True
            return JSONResponse(_clocks(stats.polls))
        return JSONResponse({**_clocks(stats.polls), **_lateness_summary(stats.lateness)})

    app = Starlette(
        routes=[
            Route("/stats", stats),
            Route("/window", window, methods=["GET", "POST"]),
            Route("/hold", hold, methods=["POST"]),
            Route("/release", release, methods=["POST"]),
        ]
    )
    sock = listening_socket("127.0.0.1", args.port)
    http = uvicorn_server(app, sock, args.port_file, log_level="warning")
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(http.serve, sockets=[sock]))
        ledger = Ledger.open(args.db)
        started_box.append(time.monotonic())
        async with Bridge(
            ledger,
            BridgeSettings(
                principals=[args.principal],
                mcp_servers=[server],
                credentials=lambda _ref: args.replica_id,
                scheduler=scheduler,
                replica=replica,
            ),
            owns_ledger=True,
        ) as bridge:
            recovered_at.append(time.monotonic())
            bridge_box.append(bridge)
            while not http.should_exit:  # SIGTERM/SIGINT: uvicorn flags it; leave cleanly
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_port_arguments(parser)
    parser.add_argument("--db", required=True, help="ledger URL (postgresql+psycopg://…)")
    parser.add_argument("--mcp", required=True, help="the MCP server's Streamable HTTP URL")
    parser.add_argument("--replica-id", required=True)
    parser.add_argument("--principal", default="acme")
    parser.add_argument("--lease-ms", type=int, default=15_000)
    parser.add_argument("--claim-every-ms", type=int, default=1_000)
    parser.add_argument("--claim-batch", type=int, default=1_000)
    parser.add_argument("--max-tasks", type=int, default=None)
    parser.add_argument("--share-evenly", action="store_true")
    parser.add_argument("--floor-ms", type=int, default=100)
    parser.add_argument("--ceiling-ms", type=int, default=30_000)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--jitter", type=float, default=SchedulerConfig().jitter)
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    anyio.run(serve, args)


if __name__ == "__main__":
    main()
