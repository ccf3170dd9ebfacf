"""Concurrent bridged ``tools/call`` against the raw SDK: 16 callers, calls per second.

Sixteen callers loop on ``echo`` (answered inline) against one server; the raw side shares one
official SDK client (:func:`bench.raw_sdk.raw_call_client`), the bridged side calls through the
public :class:`~bridge.Bridge` API, each caller inside an outer run of its own, with every call
committing its intent and its result write-ahead. The two sides alternate windows of about a
second in one run (which side goes first alternates too), so that each ratio compares
neighbouring windows: on these shared machines the raw rate alone drifts within a minute.
Measured on the default ledger (SQLite WAL, calls inline on the event loop) and on a throwaway
PostgreSQL 15 (calls in worker threads, each commit a round trip).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import anyio

from bench import scale_out
from bench.common import Report, cpu_of_processes, median
from bench.raw_sdk import NO_INPUT_KINDS, Window, raw_call_client
from bridge import Bridge, BridgeSettings, InlineResult, McpServerConfig
from bridge._ledger.commit.group_commit import GroupCommit
from tests.support.processes import ServerProcess

PRINCIPAL = "bench"
CONCURRENCY = 16
# Section 11's target on PostgreSQL: the bridged/raw calls/s ratio over the machine-CPU
# ceiling (raw / bridged machine CPU per call), both measured in the same run.
CEILING_TARGET = 0.95
WARM_UP_CALLS = 50
ARGUMENTS = {"text": "x"}


async def measure(call: Callable[[int], Awaitable[object]], seconds: float, callers: int) -> Window:
    """``callers`` loops calling ``call(caller_index)`` until ``seconds`` have passed."""
    done = 0
    deadline = time.perf_counter() + seconds
    cpu0, wall0 = time.process_time(), time.perf_counter()

    async def caller(index: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call(index)
            done += 1

    async with anyio.create_task_group() as group:
        for index in range(callers):
            group.start_soon(caller, index)
    return Window(done, time.perf_counter() - wall0, time.process_time() - cpu0)


@dataclass(frozen=True)
class Commits:
    """The group commit's counters (worker-thread runners only: SQLite has none)."""

    writes: int  # call-path writes committed
    transactions: int  # in that many transactions
    pipelined: int  # of which sent in pipeline mode
    batches: int  # batches led (a batch that fell back to one write per transaction: one)
    batch_s: float  # their wall time, until the event loop had them back

    @classmethod
    def of(cls, group: GroupCommit[Any]) -> Commits:
        return cls(
            group.writes,
            group.transactions,
            group.pipelined_transactions,
            group.batches,
            group.batch_seconds,
        )

    def __sub__(self, earlier: Commits) -> Commits:
        return Commits(*(a - b for a, b in zip(astuple(self), astuple(earlier), strict=True)))

    @property
    def per_commit(self) -> str:
        if not self.transactions:
            return "1 (inline)"
        pipelined = self.pipelined / self.transactions
        return f"{self.writes / self.transactions:.2f} ({pipelined:.0%} pipelined)"

    @property
    def batch_ms(self) -> float:
        return self.batch_s / max(self.batches, 1) * 1e3


@dataclass(frozen=True)
class Comparison:
    """Alternating windows of each side, in pairs (raw, bridged)."""

    ledger: str
    raw: list[Window]
    bridged: list[Window]
    commits: Commits  # the group commit's work over the bridged windows
    # CPU seconds the other processes (the MCP server; PostgreSQL's) used in each window
    raw_others: list[float]
    bridged_others: list[float]

    def machine_cpu_per_call_ms(self, windows: list[Window], others: list[float]) -> float:
        """This process's CPU per call plus the other processes' over the same windows."""
        total = self.total(windows)
        return (total.cpu_s + sum(others)) / max(total.polls, 1) * 1e3

    def total(self, windows: list[Window]) -> Window:
        return Window(
            sum(w.polls for w in windows),
            sum(w.wall_s for w in windows),
            sum(w.cpu_s for w in windows),
        )

    @property
    def pair_ratios(self) -> list[float]:
        return [b.rate / r.rate for r, b in zip(self.raw, self.bridged, strict=True)]


async def compare(
    server_url: str,
    ledger_url: str,
    label: str,
    pairs: int,
    window_s: float,
    other_processes: Sequence[int],
) -> Comparison:
    config = McpServerConfig(name="fast", url=server_url)
    raw_windows: list[Window] = []
    bridged_windows: list[Window] = []
    raw_others: list[float] = []
    bridged_others: list[float] = []
    async with (
        Bridge.open(
            BridgeSettings(
                ledger_url=ledger_url,
                principals=[PRINCIPAL],
                mcp_servers=[config],
                input_handlers=NO_INPUT_KINDS,
            )
        ) as bridge,
        raw_call_client(server_url) as raw,
    ):
        runs = [
            (
                await bridge.register_served_run(
                    PRINCIPAL, response_id=f"resp_{n}", session_id="hsess_bench", harness_id=None
                )
            ).ref
            for n in range(CONCURRENCY)
        ]

        async def raw_call(_: int) -> object:
            return await raw.session.call_tool("echo", ARGUMENTS, allow_claimed=True)

        async def bridged_call(caller: int) -> object:
            return await bridge.run(PRINCIPAL, runs[caller]).call_tool("fast", "echo", ARGUMENTS)

        for _ in range(WARM_UP_CALLS):
            await raw_call(0)
            outcome = await bridged_call(0)
            assert isinstance(outcome, InlineResult), outcome
        group = bridge._ledger.group_commit
        counted = Commits.of(group)
        for pair in range(pairs):
            sides = [
                (raw_call, raw_windows, raw_others),
                (bridged_call, bridged_windows, bridged_others),
            ]
            for call, windows, others in sides if pair % 2 == 0 else reversed(sides):
                before = cpu_of_processes(other_processes)
                windows.append(await measure(call, window_s, CONCURRENCY))
                others.append(cpu_of_processes(other_processes) - before)
        commits = Commits.of(group) - counted
    return Comparison(label, raw_windows, bridged_windows, commits, raw_others, bridged_others)


async def bench_concurrent_calls(quick: bool, report: Report) -> None:
    pairs, window_s = (2, 0.5) if quick else (10, 1.0)
    results: list[Comparison] = []
    with ServerProcess("bench.fast_tasks_server") as server:
        assert server.pid is not None
        with tempfile.TemporaryDirectory() as scratch:
            sqlite_url = str(Path(scratch) / "ledger.db")
            results.append(
                await compare(server.url, sqlite_url, "SQLite WAL", pairs, window_s, [server.pid])
            )
        with scale_out.postgres_server() as (pg_url, postgres):
            others = [server.pid, postgres.postmaster_pid()]
            results.append(
                await compare(server.url, pg_url, "PostgreSQL 15", pairs, window_s, others)
            )
    report.add(f"## 11. {CONCURRENCY} concurrent callers: bridged `tools/call` vs the raw SDK")
    report.add()
    report.add(
        f"{CONCURRENCY} callers loop on an inline `echo` against one server; raw: one shared "
        "official SDK client; bridged: `Run.call_tool`, each caller in an outer run of its "
        "own, intent and result committed write-ahead. Raw and bridged windows of "
        f"{window_s:g} s alternate ({pairs} pairs per ledger, which side goes first "
        "alternating); CPU is this process's (the server runs in its own). The raw call "
        "declares the tasks extension, the bridge no input kinds: both send the same request."
    )
    report.add()
    report.add(
        "| ledger | raw calls/s | bridged calls/s | **ratio** (median of pairs, range) | "
        "CPU per call raw / bridged | added CPU per call | call-path writes per commit |"
    )
    report.add("|---|---|---|---|---|---|---|")
    for result in results:
        raw, bridged = result.total(result.raw), result.total(result.bridged)
        ratios = result.pair_ratios
        report.add(
            f"| {result.ledger} | {raw.rate:.0f} | {bridged.rate:.0f} | "
            f"**{median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f}) | "
            f"{raw.cpu_per_poll_s * 1e3:.2f} / {bridged.cpu_per_poll_s * 1e3:.2f} ms | "
            f"{(bridged.cpu_per_poll_s - raw.cpu_per_poll_s) * 1e3:.2f} ms | "
            f"{result.commits.per_commit} |"
        )
    report.add()
    report.add(
        "The calls share the machine's 2 cores with the MCP server and PostgreSQL, so on busy "
        "cores calls/s is bounded by the CPU the whole machine spends per call: this process's, "
        "the MCP server's, "
        "and PostgreSQL's (its backends), over the same windows (`/proc`)."
    )
    report.add()
    report.add(
        "| ledger | machine CPU per call raw / bridged | of which PostgreSQL (bridged) | "
        "raw / bridged machine CPU per call (the ratio calls/s can reach on busy cores) | "
        f"**calls/s ratio ÷ that ceiling** (target on PostgreSQL: ≥ {CEILING_TARGET}) |"
    )
    report.add("|---|---|---|---|---|")
    for result in results:
        raw_ms = result.machine_cpu_per_call_ms(result.raw, result.raw_others)
        bridged_ms = result.machine_cpu_per_call_ms(result.bridged, result.bridged_others)
        server_share = "-"
        if result.ledger.startswith("PostgreSQL"):
            # The MCP server's CPU per call is the same on both sides: what the bridged
            # windows used beyond it, in other processes, is PostgreSQL's.
            raw_total = result.total(result.raw)
            bridged_total = result.total(result.bridged)
            server_ms = sum(result.raw_others) / max(raw_total.polls, 1) * 1e3
            others_ms = sum(result.bridged_others) / max(bridged_total.polls, 1) * 1e3
            server_share = f"{others_ms - server_ms:.2f} ms"
        ceiling = raw_ms / bridged_ms
        report.add(
            f"| {result.ledger} | {raw_ms:.2f} / {bridged_ms:.2f} ms | {server_share} | "
            f"{ceiling:.2f} | **{median(result.pair_ratios) / ceiling:.2f}** |"
        )
    report.add()
    report.add(
        "Call-path writes per commit: the intents and results of concurrent callers committed "
        "together (`bridge/_ledger/commit/group_commit.py`: PostgreSQL), a batch of one-statement "
        "writes in pipeline mode (its statements in one round trip, then `COMMIT`), from a "
        "worker thread. SQLite runs its calls inline on the event loop, where no two commits "
        "overlap: one write each."
    )
    report.add()
    for result in results:
        if result.commits.batches:
            report.add(
                f"{result.ledger}: a batch took {result.commits.batch_ms:.1f} ms on average from "
                "its hand-over to a worker thread until the event loop had it back (much of it "
                "waiting for the interpreter lock the loop holds while it runs the calls); each "
                "bridged call waits for two batches (its intent, its result)."
            )
            report.add()
