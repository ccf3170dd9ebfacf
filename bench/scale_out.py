"""Scale-out benchmarks on a throwaway PostgreSQL 15 (started and removed by the bench).

* Recovery: the only replica, holding 10,000 open handles, is SIGKILLed and restarted under the
  same replica id; how long until every handle is back under its scheduler, and how fast it
  then re-polls the (all overdue) handles against the raw SDK's ``tasks/get`` rate measured on
  the same server in the same run.
* Claims: 1, 2 and 4 processes claiming due handles (``FOR UPDATE SKIP LOCKED`` batches)
  from one ledger until none is left; claims per second together.

Handles are seeded with bulk inserts (the bench's own set-up, not the bridge's write path) so
that 50,000 of them take a second, not minutes.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from sqlalchemy import func, insert, select, update

from bench.common import Report, median, percentile
from bench.raw_sdk import RAW_TASK_ID, RawPoller, Window
from bridge._ids import DISPATCH_PREFIX, TASK_PREFIX, new_ref
from bridge._ledger.coordination.leases import ReplicaRegistry, TenantLeases
from bridge._ledger.store import DISPATCHES, TASKS, Ledger
from bridge._lifecycle import OuterStatus
from tests.support.bridging import wait_until
from tests.support.postgres import ThrowawayPostgres, fresh_database
from tests.support.processes import ServerProcess

PRINCIPAL = "bench"


@contextmanager
def postgres_database() -> Iterator[str]:
    with postgres_server() as (url, _server):
        yield url


@contextmanager
def postgres_server() -> Iterator[tuple[str, ThrowawayPostgres]]:
    """A throwaway PostgreSQL with a migrated ledger database: (its URL, the server)."""
    server = ThrowawayPostgres()
    server.start()
    try:
        with fresh_database(server.url()) as url:
            Ledger.open(url).close()  # migrated
            yield url, server
    finally:
        server.stop()


def seed_open_tasks(
    url: str, count: int, endpoint: str, interval_ms: int, *, first_due_ms: int | None = None
) -> None:
    """``count`` open handles on one run, due one millisecond apart (oldest first), all due by
    now; or, with ``first_due_ms``, due evenly over one interval from then (a steady state)."""
    ledger = Ledger.open(url)
    tenant = ledger.for_principal(PRINCIPAL)
    run = tenant.runs.open_run(
        "local:bench", response_id=new_ref("resp"), status=OuterStatus.IN_PROGRESS
    )
    now = ledger.clock() - count  # all due by now

    def due(n: int) -> int:
        return now + n if first_due_ms is None else first_due_ms + n * interval_ms // count

    dispatches, tasks = [], []
    for n in range(count):
        op_ref, task_ref = new_ref(DISPATCH_PREFIX), new_ref(TASK_PREFIX)
        common = {
            "principal": PRINCIPAL,
            "run_ref": run.ref,
            "server_endpoint": endpoint,
            "server_name": "fast",
            "tool_name": "park",
            "args_digest": "0" * 64,
            "created_at_ms": now,
            "updated_at_ms": now,
        }
        dispatches.append(
            {
                **common,
                "ref": op_ref,
                "operation_id": op_ref,
                "state": "task",
                "result_truncated": False,
                "task_ref": task_ref,
            }
        )
        tasks.append(
            {
                **common,
                "ref": task_ref,
                "op_ref": op_ref,
                "task_id": f"bench-{interval_ms}-{n}",
                "status": "working",
                "poll_interval_ms": interval_ms,
                "next_poll_due_ms": due(n),
                "outcome_truncated": False,
            }
        )
    with ledger.engine.begin() as conn:
        for start in range(0, count, 5_000):
            conn.execute(insert(DISPATCHES), dispatches[start : start + 5_000])
            conn.execute(insert(TASKS), tasks[start : start + 5_000])
    ledger.close()


# -- the report (sections 7 and 8 of bench.run) --------------------------------------------
async def bench_scale_out(handles: int, quick: bool, report: Report) -> None:
    concurrency, window_s = 16, (0.25 if quick else 1.0)
    with (
        postgres_database() as url,
        ServerProcess("bench.fast_tasks_server", args=["--log-polls"]) as server,
    ):
        recovery = await bench_recovery(url, server, handles, concurrency, window_s)
    report.add("## 7. Recovery of the only replica after SIGKILL (PostgreSQL 15)")
    report.add()
    report.add(
        f"{recovery.handles:,} open handles leased to one replica process "
        "(`bench/replica_process.py`, leased mode, 16 polls in flight); SIGKILL, then the same "
        "replica id restarted: a new incarnation takes its handles back at once (claims, "
        "oldest due first), then polls every one of them (all overdue). While it re-polls, "
        f"the driver alternates {window_s:g} s windows of the replica (resumed, then held "
        "until its polls in flight finish) and of the raw SDK (16 concurrent `tasks/get` "
        "callers, one client, connected before the kill) against the same server, so that "
        "each ratio compares two neighbouring windows: on these shared machines the raw "
        "rate alone drifts by a quarter within a minute."
    )
    report.add()
    report.add("| measure | value |")
    report.add("|---|---|")
    report.add(
        f"| bridge start → every handle back under the scheduler | "
        f"**{recovery.bridge_to_watched_s:.2f} s** (target ≤ 2 s) |"
    )
    report.add(
        f"| process spawn → every handle back (adds interpreter + imports) | "
        f"{recovery.spawn_to_watched_s:.2f} s |"
    )
    if recovery.windows:
        ratios, cpus = recovery.rate_ratios, recovery.cpu_ratios
        replica, raw = recovery.total(0), recovery.total(1)
        report.add(
            f"| re-polling rate / raw SDK rate, median of {len(ratios)} window pairs "
            f"(range {min(ratios):.2f} to {max(ratios):.2f}) | **{median(ratios):.2f}** "
            f"(target ≥ 0.85) |"
        )
        report.add(
            f"| all windows together: replica {replica.rate:.0f}/s, raw SDK {raw.rate:.0f}/s | "
            f"{replica.rate / raw.rate:.2f} |"
        )
        report.add(
            f"| client CPU per poll, raw SDK / replica: {raw.cpu_per_poll_s * 1e3:.2f} ms / "
            f"{replica.cpu_per_poll_s * 1e3:.2f} ms; median of window pairs | "
            f"**{median(cpus):.2f}** |"
        )
    else:
        report.add("| re-polling rate / raw SDK rate | too few handles for one window |")
    report.add(
        f"| handles polled exactly once after the restart (server-side count) | "
        f"{recovery.polled_once:,} of {recovery.handles:,} (none starved, none twice) |"
    )
    report.add(
        f"| order: distance from oldest-due-first, p99 (positions in the server's log) | "
        f"{recovery.displacement_p99:.0f} |"
    )
    report.add()
    with postgres_database() as url:
        tasks = 5_000 if quick else 50_000
        seed_open_tasks(url, tasks, "http://127.0.0.1:9/mcp", 1000)
        rates = {n: claims_per_second(url, n, 500)[0] for n in (1, 2, 4)}
    report.add("## 8. Claims per second on PostgreSQL")
    report.add()
    report.add(
        f"{tasks:,} due handles; 1, 2 and 4 processes each claim batches of 500 "
        "(`UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED)`, oldest due first, only rows no "
        "live membership holds) until none is left. Every handle claimed exactly once: the "
        "claimers report the refs they took, and a ref taken twice fails the run."
    )
    report.add()
    report.add("| replicas | claims/s together | ratio to 1 replica |")
    report.add("|---|---|---|")
    for n, rate in rates.items():
        mark = " (target ≥ 5,000)" if n == 2 else ""
        report.add(f"| {n} | **{rate:,.0f}**{mark} | {rate / rates[1]:.2f} |")
    report.add()


# -- recovery ------------------------------------------------------------------------------------
@dataclass
class Recovery:
    handles: int
    spawn_to_watched_s: float
    bridge_to_watched_s: float
    # (replica, raw SDK) measurement windows, alternating while the replica re-polls
    windows: list[tuple[Window, Window]]
    polled_once: int
    displacement_p99: float

    @property
    def rate_ratios(self) -> list[float]:
        return [replica.rate / raw.rate for replica, raw in self.windows]

    @property
    def cpu_ratios(self) -> list[float]:
        """Raw SDK CPU per poll / replica CPU per poll (above 1: the replica is cheaper)."""
        return [raw.cpu_per_poll_s / replica.cpu_per_poll_s for replica, raw in self.windows]

    def total(self, side: int) -> Window:
        windows = [pair[side] for pair in self.windows]
        return Window(
            sum(w.polls for w in windows),
            sum(w.wall_s for w in windows),
            sum(w.cpu_s for w in windows),
        )


async def replica_stats(port: int) -> dict[str, Any]:
    """``GET /stats`` of a ``bench.replica_process`` ({} while it is still starting)."""
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{port}/stats", timeout=10)
        return dict(response.json()) if response.status_code == 200 else {}


async def _replica_post(port: int, what: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.post(f"http://127.0.0.1:{port}/{what}", timeout=30)
        response.raise_for_status()
        return dict(response.json())


async def alternate_windows(
    port: int, raw: RawPoller, handles: int, seconds: float
) -> list[tuple[Window, Window]]:
    """Replica and raw SDK in turn, ``seconds`` each, until the replica has polled
    ``handles`` times; only one of the two polls at any moment. A replica window in which it
    ran out of due handles is not counted."""
    windows: list[tuple[Window, Window]] = []
    while True:
        released = await _replica_post(port, "release")
        await anyio.sleep(seconds)
        held = await _replica_post(port, "hold")  # answers once its polls in flight are done
        if held["polls"] >= handles:
            await _replica_post(port, "release")
            return windows
        replica = Window(
            int(held["polls"] - released["polls"]),
            float(held["at"] - released["at"]),
            float(held["cpu"] - released["cpu"]),
        )
        windows.append((replica, await raw.measure(seconds)))


async def call_json(url: str, tool: str) -> Any:
    """Call a no-argument tool of the fast Tasks server and decode its JSON text."""
    http = create_mcp_http_client()
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        result = await client.session.call_tool(tool, {})
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def bench_recovery(
    url: str, mcp: ServerProcess, handles: int, concurrency: int, window_s: float
) -> Recovery:
    interval_ms = 600_000  # nothing is due twice during the measurement: one poll each
    seed_open_tasks(url, handles, mcp.url, interval_ms)
    replica = ServerProcess(
        "bench.replica_process",
        args=[
            "--db", url, "--mcp", mcp.url, "--replica-id", "solo", "--principal", PRINCIPAL,
            "--max-in-flight", str(concurrency), "--ceiling-ms", str(interval_ms),
        ],
    )  # fmt: skip
    replica.start(timeout=60)

    async def all_watched() -> dict[str, Any] | None:
        stats = await replica_stats(replica.port)
        return stats if stats.get("watched") == handles else None

    try:
        await wait_until(all_watched, timeout=120)
        # every handle polled once (server side) and nothing in flight any more
        await wait_until(lambda: _served_once(mcp.url, handles, {}), timeout=600, interval=0.5)
        counts_before = await wait_until(lambda: _settled_counts(mcp.url), timeout=60)
        log_before = len(await call_json(mcp.url, "poll_log"))
        async with RawPoller(mcp.url, concurrency) as raw:  # connected before the kill
            replica.kill()  # SIGKILL with every handle leased to it
            spawned = time.monotonic()
            replica.start(timeout=60)
            # The replica stamps its own recovery time: asked a few times a second only, so
            # that the driver takes no CPU from the replica it measures.
            stats = await wait_until(all_watched, timeout=120, interval=0.1)
            with anyio.fail_after(600):  # a replica that stops polling fails the bench
                windows = await alternate_windows(replica.port, raw, handles, window_s)
        await wait_until(lambda: _served_once(mcp.url, handles, counts_before), timeout=60)
        counts = await wait_until(lambda: _settled_counts(mcp.url), timeout=60)
        after_restart = (await call_json(mcp.url, "poll_log"))[log_before:]
    finally:
        replica.stop()
    seeded = f"bench-{interval_ms}-"  # the raw SDK windows poll another id
    once = sum(
        1 for k, v in counts.items() if k.startswith(seeded) and v - counts_before.get(k, 0) == 1
    )
    order = [
        int(task_id.rsplit("-", 1)[1])
        for task_id, _, _ in after_restart
        if task_id.startswith(seeded)
    ]
    recovered = float(stats["recovered_at"])
    return Recovery(
        handles=handles,
        spawn_to_watched_s=recovered - spawned,
        bridge_to_watched_s=recovered - float(stats["bridge_started"]),
        windows=windows,
        polled_once=once,
        displacement_p99=summarize_displacement(order),
    )


async def _served_once(url: str, handles: int, before: dict[str, int]) -> dict[str, Any] | None:
    """Every seeded handle polled since ``before`` (the raw SDK's own id does not count)."""
    counts: dict[str, int] = await call_json(url, "poll_counts")
    polled = sum(
        1 for task_id, n in counts.items() if task_id != RAW_TASK_ID and n > before.get(task_id, 0)
    )
    return counts if polled >= handles else None


async def _settled_counts(url: str) -> dict[str, Any] | None:
    first = await call_json(url, "poll_counts")
    await anyio.sleep(0.5)
    return first if first == await call_json(url, "poll_counts") else None


# -- claims --------------------------------------------------------------------------------------
def _claimer(url: str, name: str, batch: int, ready: Any, go: Any, results: Any) -> None:
    ledger = Ledger.open(url, upgrade=False)
    member = ReplicaRegistry(ledger).register(name, 60_000)
    leases = TenantLeases(ledger.for_principal(PRINCIPAL))
    # Warm the connection and the statement (what it claims counts too; it may be nothing).
    claimed = [task.ref for task in leases.claim_tasks(member, 1)]
    ready.put(name)
    go.wait()
    started = time.monotonic()
    while taken := leases.claim_tasks(member, batch):
        claimed.extend(task.ref for task in taken)
    results.put((name, claimed, started, time.monotonic()))
    ledger.close()


def claims_per_second(url: str, replicas: int, batch: int) -> tuple[float, int]:
    """All open handles released, then claimed by ``replicas`` processes until none is left."""
    ledger = Ledger.open(url, upgrade=False)
    with ledger.engine.begin() as conn:
        conn.execute(update(TASKS).values(lease_owner=None, lease_incarnation=None))
    ledger.close()
    context = multiprocessing.get_context("spawn")
    ready, go, results = context.Queue(), context.Event(), context.Queue()
    workers = [
        context.Process(target=_claimer, args=(url, f"claimer-{n}", batch, ready, go, results))
        for n in range(replicas)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:  # every worker imported, registered and warmed up: start together
        ready.get(timeout=120)
    go.set()
    rows = [results.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    claimed = [ref for row in rows for ref in row[1]]
    total, twice = len(claimed), len(claimed) - len(set(claimed))
    wall = max(r[3] for r in rows) - min(r[2] for r in rows)
    ledger = Ledger.open(url, upgrade=False)
    with ledger.engine.connect() as conn:
        seeded = conn.execute(select(func.count()).select_from(TASKS)).scalar_one()
        unclaimed = conn.execute(
            select(func.count()).select_from(TASKS).where(TASKS.c.lease_owner.is_(None))
        ).scalar_one()
    ledger.close()
    if twice or unclaimed or total != seeded:
        raise RuntimeError(
            f"{total} claims for {seeded} handles: {twice} claimed twice, {unclaimed} unclaimed"
        )
    return total / wall, total


def summarize_displacement(order: list[int]) -> float:
    """How far from oldest-due-first the polls came: |position - due rank|, p99."""
    ranked = {n: rank for rank, n in enumerate(sorted(order))}
    return percentile([float(abs(pos - ranked[n])) for pos, n in enumerate(order)], 99)
