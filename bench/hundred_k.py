"""100,000 open handles on PostgreSQL shared by 3 replica processes (``make bench`` section 12).

A throwaway PostgreSQL 15 is seeded in bulk with open handles whose next polls are spread
evenly over one ``pollIntervalMs``, starting a little later (a steady state, as after a long
run). Three ``bench.replica_process`` replicas (leased mode, even shares) start together
against one fast Tasks server that logs every ``tasks/get``; an idle replica holding nothing
is the baseline for RSS per handle. The interval is chosen so that the demand is half of the
raw SDK's ``tasks/get`` capacity measured on the same server in the same run (the three
replicas, the server and PostgreSQL share the machine's cores). Measured:

* take-up: how long until every handle is claimed and under some replica's scheduler, and the
  claims per second meanwhile; each replica's share;
* a steady window of one interval: lateness per replica (its scheduler's own record), polls per
  second against the demand, RSS per replica (``/proc``), and from the server's log that every
  handle was polled in the window and none twice within one interval;
* one replica SIGKILLed: how long until the others own its handles, and until they have polled
  every one of them.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from sqlalchemy import func, select

from bench.common import Report, cpu_seconds, stat_fields
from bench.raw_sdk import raw_poll_capacity
from bench.scale_out import PRINCIPAL, postgres_database, replica_stats, seed_open_tasks
from bridge._ledger.store import TASKS, Ledger
from tests.support.bridging import wait_until
from tests.support.processes import ServerProcess

REPLICAS = ("r0", "r1", "r2")
IDLE = "idle"  # a replica of another principal holding nothing: RSS of the bridge alone
IN_FLIGHT = 16  # polls in flight per replica


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine (``/proc/stat``)."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _process_cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    return cpu_seconds(stat_fields(pid))


class PollLog:
    """The fast Tasks server's log of every ``tasks/get``, read incrementally."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.entries: list[tuple[str, float, str]] = []  # (task id, server monotonic ms, caller)

    async def read_new(self) -> list[tuple[str, float, str]]:
        http = create_mcp_http_client()
        async with http, Client(streamable_http_client(self.url, http_client=http)) as client:
            result = await client.session.call_tool("poll_log", {"since": len(self.entries)})
        text = result.content[0].text  # type: ignore[union-attr]
        new = [(str(t), float(at), str(c)) for t, at, c in json.loads(text)]
        self.entries.extend(new)
        return new


@dataclass
class Steady:
    seconds: float
    polls_logged: int
    handles_polled: int
    min_gap_ms: float | None  # the shortest time between two polls of one handle
    per_replica: dict[str, dict[str, Any]]
    rss_kb: dict[str, list[int]]
    server_cpu_s: float
    machine_busy: float  # fraction of all cores


@dataclass
class TakeOver:
    handles: int
    owned_s: float
    polled_s: float
    survivors: dict[str, int] = field(default_factory=dict)


def _replica(name: str, db: str, mcp: str, interval_ms: int, lease_ms: int) -> ServerProcess:
    principal, extra = (PRINCIPAL, []) if name != IDLE else ("idle", ["--max-tasks", "0"])
    return ServerProcess(
        "bench.replica_process",
        args=[
            "--db", db, "--mcp", mcp, "--replica-id", name, "--principal", principal,
            "--lease-ms", str(lease_ms), "--max-in-flight", str(IN_FLIGHT),
            "--ceiling-ms", str(2 * interval_ms), "--jitter", "0", "--share-evenly", *extra,
        ],
    )  # fmt: skip


async def _post(port: int, path: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.request("POST", f"http://127.0.0.1:{port}/{path}", timeout=30)
        response.raise_for_status()
        return dict(response.json())


async def _get(port: int, path: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{port}/{path}", timeout=30)
        response.raise_for_status()
        return dict(response.json())


async def _all_stats(replicas: dict[str, ServerProcess]) -> dict[str, dict[str, Any]]:
    return {name: await replica_stats(proc.port) for name, proc in replicas.items()}


async def take_up(
    replicas: dict[str, ServerProcess], handles: int, seeded_at: float, timeout_s: float
) -> tuple[float, float, dict[str, dict[str, Any]]]:
    """(seed commit → all watched in s, claims/s while claiming, last stats per replica)."""
    first_claim: float | None = None
    deadline = time.monotonic() + timeout_s
    while True:
        stats = await _all_stats(replicas)
        now = time.monotonic()
        claimed = sum(s.get("claimed_tasks") or 0 for s in stats.values())
        if claimed and first_claim is None:
            first_claim = now
        if sum(s.get("watched") or 0 for s in stats.values()) >= handles:
            break
        if now > deadline:
            raise RuntimeError(f"only {claimed} of {handles} handles claimed in {timeout_s} s")
        await anyio.sleep(0.1)
    claiming = max(now - (first_claim or seeded_at), 0.1)
    return now - seeded_at, handles / claiming, stats


async def _registered(replicas: dict[str, ServerProcess]) -> bool:
    return all(s.get("replica") for s in (await _all_stats(replicas)).values())


async def steady_window(
    replicas: dict[str, ServerProcess],
    server: ServerProcess,
    log: PollLog,
    start_wall_ms: int,
    seconds: float,
) -> Steady:
    """From ``start_wall_ms`` (the first seeded due time) on, for ``seconds``."""
    await anyio.sleep(max(0.0, (start_wall_ms - _wall_ms()) / 1000))
    opened = {name: await _post(proc.port, "window") for name, proc in replicas.items()}
    await log.read_new()
    first_entry = len(log.entries)
    started = time.monotonic()
    busy0, total0 = _busy_jiffies()
    server_cpu0 = _process_cpu_s(server.pid)
    rss: dict[str, list[int]] = {name: [] for name in replicas}
    end = started + seconds
    while (left := end - time.monotonic()) > 0:
        await anyio.sleep(min(5.0, left))
        for name, stats in (await _all_stats(replicas)).items():
            rss[name].append(int(stats["rss_kb"]))
        await log.read_new()
    per_replica = {name: await _get(proc.port, "window") for name, proc in replicas.items()}
    for name, summary in per_replica.items():
        summary["cpu_s"] = float(summary["cpu"]) - float(opened[name]["cpu"])
    server_cpu = _process_cpu_s(server.pid) - server_cpu0
    busy1, total1 = _busy_jiffies()
    elapsed = time.monotonic() - started
    await log.read_new()
    stop_ms = started * 1000 + seconds * 1000
    window = [e for e in log.entries[first_entry:] if e[1] <= stop_ms and e[0].startswith("bench")]
    last: dict[str, float] = {}
    min_gap: float | None = None
    for task_id, at, _ in window:
        if task_id in last:
            gap = at - last[task_id]
            min_gap = gap if min_gap is None else min(min_gap, gap)
        last[task_id] = at
    return Steady(
        seconds=elapsed,
        polls_logged=len(window),
        handles_polled=len(last),
        min_gap_ms=min_gap,
        per_replica=per_replica,
        rss_kb=rss,
        server_cpu_s=server_cpu,
        machine_busy=(busy1 - busy0) / max(total1 - total0, 1),
    )


def _held_task_ids(db: str, owner: str) -> set[str]:
    ledger = Ledger.open(db, upgrade=False)
    with ledger.engine.connect() as conn:
        rows = conn.execute(select(TASKS.c.task_id).where(TASKS.c.lease_owner == owner))
        held = {row.task_id for row in rows}
    ledger.close()
    return held


def _still_owned_by(db: str, owner: str) -> int:
    ledger = Ledger.open(db, upgrade=False)
    with ledger.engine.connect() as conn:
        count = conn.execute(
            select(func.count()).select_from(TASKS).where(TASKS.c.lease_owner == owner)
        ).scalar_one()
    ledger.close()
    return int(count)


async def take_over(
    db: str, victim: ServerProcess, name: str, log: PollLog, timeout_s: float
) -> TakeOver:
    """SIGKILL one replica; time until its handles are owned, then polled, by the others."""
    held = _held_task_ids(db, name)
    await log.read_new()
    killed = time.monotonic()
    victim.kill()
    owned_s: float | None = None
    waiting = set(held)
    survivors: dict[str, int] = {}
    deadline = killed + timeout_s
    while waiting or owned_s is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(waiting)} of {len(held)} handles not polled after the kill")
        await anyio.sleep(0.5)
        if owned_s is None and _still_owned_by(db, name) == 0:
            owned_s = time.monotonic() - killed
        for task_id, _, caller in await log.read_new():
            if task_id in waiting and caller != name:
                waiting.discard(task_id)
                survivors[caller] = survivors.get(caller, 0) + 1
    polled_s = time.monotonic() - killed
    return TakeOver(len(held), owned_s, polled_s, survivors)


def _start_together(procs: list[ServerProcess]) -> None:
    with ThreadPoolExecutor(max_workers=len(procs)) as pool:
        for started in [pool.submit(p.start, 60) for p in procs]:
            started.result()


def _mb(kb: float) -> str:
    return f"{kb / 1024:.0f} MB"


async def bench_hundred_k(quick: bool, report: Report) -> None:
    handles = 5_000 if quick else 100_000
    lease_ms = 5_000 if quick else 15_000
    lead_ms = 15_000 if quick else 60_000  # claims finish before the first handle is due
    with (
        postgres_database() as db,
        ServerProcess("bench.fast_tasks_server", args=["--log-polls"]) as server,
    ):
        raw = await raw_poll_capacity(server.url, 2.0 if quick else 5.0, IN_FLIGHT)
        capacity = raw.rate
        interval_ms = round(handles / (0.5 * capacity) * 1000)
        demand = handles / interval_ms * 1000
        log = PollLog(server.url)
        replicas = {
            name: _replica(name, db, server.url, interval_ms, lease_ms) for name in REPLICAS
        }
        idle = _replica(IDLE, db, server.url, interval_ms, lease_ms)
        try:
            # Registered before the handles appear: a replica started a second after the
            # others would find them all claimed (claims are not rebalanced).
            _start_together(list(replicas.values()))
            await wait_until(lambda: _registered(replicas), timeout=60)
            seeding = time.monotonic()
            first_due = _wall_ms() + lead_ms
            seed_open_tasks(db, handles, server.url, interval_ms, first_due_ms=first_due)
            seeded_at = time.monotonic()
            seeded_s = seeded_at - seeding
            to_watched_s, claims_rate, taken = await take_up(
                replicas, handles, seeded_at, lead_ms / 1000
            )
            late_start = _wall_ms() > first_due
            # Started once the others hold their shares (a live membership counts in the even
            # share), stopped before the kill.
            idle.start(timeout=60)
            steady = await steady_window(
                replicas, server, log, first_due, interval_ms / 1000 + (1 if quick else 2)
            )
            idle_rss = int((await replica_stats(idle.port))["rss_kb"])
            idle.stop()
            stats = await _all_stats(replicas)
            over = await take_over(db, replicas["r0"], "r0", log, 120 if quick else 600)
        finally:
            for proc in [*replicas.values(), idle]:
                proc.stop()

    report.add(f"## 12. {handles:,} open handles on PostgreSQL, 3 replicas")
    report.add()
    report.add(
        f"Raw SDK `tasks/get` capacity on the fast Tasks server, measured first: "
        f"**{capacity:.0f}/s** ({IN_FLIGHT} callers). Each handle's `pollIntervalMs` = "
        f"{interval_ms:,} ms, so the demand is {demand:.0f} polls/s (~50 % of that capacity: "
        "the 3 replicas, the server and PostgreSQL share the cores). Handles seeded in bulk "
        f"({seeded_s:.1f} s, one transaction), their next polls spread evenly over one "
        f"interval starting {lead_ms / 1000:.0f} s later; then 3 replica processes (leased "
        f"mode, {IN_FLIGHT} polls in flight each, no jitter, lease {lease_ms / 1000:.0f} s, "
        "`share_evenly`) are "
        "started together and registered before the handles are committed (one transaction); "
        "an idle replica holding nothing is the RSS baseline."
    )
    report.add()
    report.add("| measure | value |")
    report.add("|---|---|")
    report.add(
        f"| seeding committed → all {handles:,} claimed and under a scheduler | "
        f"**{to_watched_s:.1f} s**{' (after the first due time!)' if late_start else ''} |"
    )
    report.add(f"| claims/s during take-up (3 replicas together) | **{claims_rate:,.0f}** |")
    shares = ", ".join(f"{n} {int(s['watched']):,}" for n, s in taken.items())
    report.add(f"| handles per replica (balance) | {shares} |")
    report.add(
        f"| steady window: one interval ({steady.seconds:.0f} s) | polls logged by the server "
        f"{steady.polls_logged:,} = **{steady.polls_logged / steady.seconds:.0f}/s** (demand "
        f"{demand:.0f}/s) |"
    )
    gap = "none" if steady.min_gap_ms is None else f"{steady.min_gap_ms / 1000:.1f} s"
    report.add(
        f"| handles polled in the window (server log) | **{steady.handles_polled:,} of "
        f"{handles:,}**; shortest gap between two polls of one handle: {gap} "
        f"(interval {interval_ms / 1000:.1f} s) |"
    )
    report.add(
        f"| CPU in the window | server {steady.server_cpu_s / steady.seconds:.0%} of a core; "
        f"whole machine {steady.machine_busy:.0%} busy |"
    )
    report.add(f"| idle replica (no handles) RSS | {_mb(idle_rss)} |")
    report.add()
    report.add(
        "| replica | handles | polls in window | lateness p50 / p99 / max | CPU | "
        "RSS steady / peak | RSS per handle |"
    )
    report.add("|---|---|---|---|---|---|---|")
    for name in REPLICAS:
        window, now = steady.per_replica[name], stats[name]
        held = int(taken[name]["watched"])
        rss = steady.rss_kb[name]
        rss_steady = sorted(rss)[len(rss) // 2] if rss else int(now["rss_kb"])
        per_handle = (rss_steady - idle_rss) * 1024 / held if held else 0.0
        report.add(
            f"| {name} | {held:,} | {window.get('polls', 0):,} | "
            f"{window.get('p50_ms', '-')} / {window.get('p99_ms', '-')} / "
            f"{window.get('max_ms', '-')} ms | "
            f"{_window_cpu(window, steady.seconds)} | "
            f"{_mb(rss_steady)} / {_mb(int(now['peak_rss_kb']))} | {per_handle:,.0f} B |"
        )
    report.add()
    survivors = ", ".join(f"{k} {v:,}" for k, v in sorted(over.survivors.items()))
    report.add(
        f"Then r0 is SIGKILLed holding {over.handles:,} handles (all overdue by then: the "
        "ledger's due time is written only when a poll sees a change): the others own every "
        f"one of them after **{over.owned_s:.1f} s** (lease {lease_ms / 1000:.0f} s) and have "
        f"polled every one after **{over.polled_s:.1f} s** ({survivors})."
    )
    report.add()


def _window_cpu(window: dict[str, Any], seconds: float) -> str:
    return f"{float(window.get('cpu_s', 0.0)) / seconds:.0%}" if "cpu_s" in window else "-"
