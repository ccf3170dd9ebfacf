"""What a long history costs (``python -m bench.history``; docs/benchmarks.md section 17).

Two ledgers in the same run, on the same server (or the same disk): both hold the same live
runs; one also holds finished runs seeded beside them in bulk (each with one call, one completed
task and five events, as a short bridged call leaves). They are measured in turns, one sample
(one query, or a block of calls) on one then one on the other, so that the load of a shared
machine, which changes from second to second, falls on both alike. Each figure is the same
operation on both, as a ratio:

* the call path: the two write-ahead commits of a bridged call (``begin_dispatch`` and
  ``record_immediate_result``) on a live run, p50;
* recovery: the reads a restarting bridge makes (open tasks, open runs, pending inputs,
  dispatches in flight, runs never acknowledged);
* the operator's queries: ``bridge runs`` (the newest runs) and the attention inbox (pending
  inputs, calls of unknown outcome), p99;
* bytes per finished run (the file, or the database, before and after seeding);
* a prune of every seeded run while calls go on: runs/s, and the call path's p50 meanwhile
  against the same calls without a prune.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text

from bench import history_seed
from bench.common import Report, machine, percentile, provenance
from bridge._ledger.reads.attention import AttentionWindow
from bridge._ledger.retention.policy import RetentionPolicy
from bridge._ledger.retention.prune import Prune
from bridge._ledger.retention.vacuum import return_space
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import CallState, OuterStatus, TaskStatus

REPO = Path(__file__).resolve().parents[1]
PRINCIPAL = "acme"
ENDPOINT = "http://127.0.0.1:9/mcp"
LIVE = 1_000
DAY_MS = 86_400_000


def seed_live(tenant: TenantLedger) -> list[str]:
    """Live runs: in progress, each with a task still working (what recovery takes back)."""
    refs = []
    for i in range(LIVE):
        run = tenant.runs.open_run(
            "local:bench",
            response_id=f"resp_live{i}",
            session_id="hsess_b",
            harness_id="chrn_b",
            status=OuterStatus.IN_PROGRESS,
        )
        op = tenant.calls.begin_dispatch(
            run.ref,
            server_endpoint=ENDPOINT,
            server_name="reports",
            tool_name="report",
            arguments={"i": i},
        )
        tenant.calls.mark_dispatch_sent(op.ref)
        tenant.calls.record_task_created(
            op.ref,
            task_id=f"live-{i}-{secrets.token_hex(8)}",
            status=TaskStatus.WORKING,
            ttl_ms=None,
            poll_interval_ms=1000,
        )
        refs.append(run.ref)
    return refs


def seed_finished(ledger: Ledger, count: int, at_ms: int) -> float:
    """``count`` finished runs in bulk, ``at_ms`` old; the seconds it took."""
    return history_seed.seed_finished(ledger, PRINCIPAL, ENDPOINT, count, at_ms)


def call_path(tenant: TenantLedger, run_ref: str, calls: int) -> list[float]:
    """Seconds per bridged call's two write-ahead commits."""
    took = []
    for i in range(calls):
        started = time.perf_counter()
        op = tenant.calls.begin_dispatch(
            run_ref,
            server_endpoint=ENDPOINT,
            server_name="reports",
            tool_name="quick",
            arguments={"n": secrets.token_hex(6), "i": i},
            sent=True,
        )
        tenant.calls.record_immediate_result(op.ref, {"content": []}, intent=op)
        took.append(time.perf_counter() - started)
    return took


def recovery_reads(tenant: TenantLedger) -> None:
    tenant.reads.list_tasks(open_only=True)
    tenant.reads.list_runs(open_only=True, limit=10_000)
    tenant.reads.pending_input_requests()
    tenant.rounds.pending_call_inputs()
    tenant.reads.list_dispatches(states=[CallState.PENDING, CallState.SENT])
    tenant.reads.unacknowledged_runs()


def runs_query(tenant: TenantLedger, caller: str) -> None:
    """The 20 newest runs with their tasks and calls; the benchmark's own caller run is left
    out: it holds every call the call path made, more at each measurement."""
    for run in tenant.reads.list_runs(limit=21):
        if run.ref != caller:
            tenant.reads.list_tasks(run_ref=run.ref)
            tenant.reads.list_dispatches(run_ref=run.ref)


def attention_query(tenant: TenantLedger) -> None:
    """The operator's inbox as ``bridge attention`` and the console read it."""
    tenant.attention.attention(AttentionWindow(now_ms=int(time.time() * 1000)))


def timed(fn: Callable[[], None], times: int) -> list[float]:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        fn()
        took.append(time.perf_counter() - started)
    return took


def size_bytes(ledger: Ledger, path: Path | None) -> int:
    if path is not None:
        with ledger.engine.connect() as conn:
            conn.execution_options(bridge_read=True)
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
            page = conn.exec_driver_sql("PRAGMA page_size").scalar()
        return int(pages or 0) * int(page or 0)
    with ledger.engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar() or 0)


def page_size(ledger: Ledger) -> int:
    with ledger.engine.connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA page_size").scalar() or 0)


#: Rounds of measurement, each taking every figure's samples from the two ledgers in turns.
ROUNDS = 3
CALL_BLOCK = 50
#: Samples of each query per ledger per round: a p99 of over a thousand pooled samples is not
#: one garbage-collector pause among a few hundred.
QUERY_SAMPLES = 350


def measure_round(
    sides: list[tuple[TenantLedger, str]], calls: int, queries: int = QUERY_SAMPLES
) -> list[dict[str, list[float]]]:
    """One round of samples of every figure on each (tenant, caller run), one sample (a block
    of calls) on one, then one on the other, so a burst of load falls on both alike."""
    taken: list[dict[str, list[float]]] = [
        {"load": [], "call": [], "recovery": [], "runs": [], "attention": []} for _ in sides
    ]

    def turns(key: str, times: int, sample: Callable[[TenantLedger, str], list[float]]) -> None:
        for _ in range(times):
            for (tenant, caller), into in zip(sides, taken, strict=True):
                into[key].extend(sample(tenant, caller))

    for tenant, caller in sides:  # warm: statements prepared, pages cached
        call_path(tenant, caller, CALL_BLOCK)
    turns("load", 1, lambda t, c: [os.getloadavg()[0]])
    turns("call", max(1, calls // CALL_BLOCK), lambda t, c: call_path(t, c, CALL_BLOCK))
    turns("recovery", 7, lambda t, c: timed(lambda: recovery_reads(t), 1))
    turns("runs", queries, lambda t, c: timed(lambda: runs_query(t, c), 1))
    turns("attention", queries, lambda t, c: timed(lambda: attention_query(t), 1))
    return taken


def _p50_p99(name: str, took: list[float]) -> dict[str, float]:
    return {f"{name}_p50": percentile(took, 50), f"{name}_p99": percentile(took, 99)}


def figures(rounds: list[dict[str, list[float]]]) -> dict[str, float]:
    """The pooled samples of the rounds as the report's figures."""
    pooled: dict[str, list[float]] = {}
    for one in rounds:
        for key, values in one.items():
            pooled.setdefault(key, []).extend(values)
    return {
        "load": sum(pooled["load"]) / len(pooled["load"]),
        "call_p50": percentile(pooled["call"], 50),
        "recovery": percentile(pooled["recovery"], 50),
        **_p50_p99("runs", pooled["runs"]),
        **_p50_p99("attention", pooled["attention"]),
    }


class Turns:
    """Lets a prune run only while the calls' turn says so: it finishes the batch (and the
    pause after it) it is in before the calls go on without it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._allowed = False
        self._busy = False

    def batch(self, step: Callable[[], bool]) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._allowed)
            self._busy = True
        try:
            return step()
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def allow(self, allowed: bool) -> None:
        with self._cond:
            self._allowed = allowed
            self._cond.notify_all()
            if not allowed:
                self._cond.wait_for(lambda: not self._busy)


def prune_while_calling(ledger: Ledger, live_run: str, most: int | None) -> dict[str, float]:
    """Prune what was seeded (the oldest ``most`` runs of it, if given) in a thread, the
    batches paced as a running bridge paces them, while calls go on here in turns: a block of
    calls with the prune running, then one with the prune held between its batches."""
    tenant = ledger.for_principal(PRINCIPAL)
    policy = RetentionPolicy(max_age_days=1, min_age_days=1)
    job = Prune(ledger, PRINCIPAL, policy)
    done = threading.Event()
    turns = Turns()

    def one_batch() -> bool:
        more = job.step() and (most is None or job.report.runs < most)
        if more:
            time.sleep(job.pause_s)
        return more

    def pruner() -> None:
        while turns.batch(one_batch):
            pass
        done.set()

    thread = threading.Thread(target=pruner)
    thread.start()
    during: list[float] = []
    without: list[float] = []
    running_s = 0.0
    while not done.is_set():
        started = time.monotonic()
        turns.allow(True)
        during.extend(call_path(tenant, live_run, CALL_BLOCK))
        turns.allow(False)  # waits for the batch in progress
        running_s += time.monotonic() - started
        if not done.is_set():
            without.extend(call_path(tenant, live_run, CALL_BLOCK))
    turns.allow(True)
    thread.join()
    pages = return_space(ledger.engine)
    return {
        "runs": job.report.runs,
        "rate": job.report.runs / running_s,
        "during_p50": percentile(during, 50),
        "without_p50": percentile(without, 50),
        "calls": len(during),
        "pages": pages,
    }


@contextmanager
def ledgers_at(backend: str, workdir: Path) -> Iterator[tuple[Ledger, Ledger, Path | None]]:
    """Two ledgers on one server (or one disk): (live runs only, with the history, the
    history's SQLite file)."""
    if backend == "sqlite":
        path = workdir / "history.db"
        empty, full = Ledger.open(workdir / "live-only.db"), Ledger.open(path)
        try:
            yield empty, full, path
        finally:
            empty.close()
            full.close()
        return
    from bench.scale_out import postgres_server
    from tests.support.postgres import fresh_database

    with postgres_server() as (url, server), fresh_database(server.url()) as other:
        empty, full = Ledger.open(other), Ledger.open(url)
        try:
            yield empty, full, None
        finally:
            empty.close()
            full.close()


def live_ledger(ledger: Ledger) -> str:
    """The live runs, and the benchmark's own caller run (returned)."""
    tenant = ledger.for_principal(PRINCIPAL)
    seed_live(tenant)
    return tenant.runs.open_run(
        "local:bench",
        response_id="resp_caller",
        session_id="hsess_c",
        harness_id="chrn_b",
        status=OuterStatus.IN_PROGRESS,
    ).ref


def bench_history(
    backend: str,
    finished: int,
    calls: int,
    report: Report,
    prune_most: int | None = None,
    queries: int = QUERY_SAMPLES,
) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-history-") as tmp,
        ledgers_at(backend, Path(tmp)) as (other, ledger, path),
    ):
        callers = {id(other): live_ledger(other), id(ledger): live_ledger(ledger)}
        caller = callers[id(ledger)]
        empty_bytes = size_bytes(ledger, path)
        seeded_s = seed_finished(ledger, finished, ledger.clock() - 30 * DAY_MS)
        full_bytes = size_bytes(ledger, path)
        sides = [(one.for_principal(PRINCIPAL), callers[id(one)]) for one in (other, ledger)]
        rounds = [measure_round(sides, calls, queries) for _ in range(ROUNDS)]
        empty, full = figures([r[0] for r in rounds]), figures([r[1] for r in rounds])
        load = os.getloadavg()[0]
        pruned = prune_while_calling(ledger, caller, prune_most)
        after_bytes = size_bytes(ledger, path)
        psize = page_size(ledger) if path is not None else 0
    name = {"sqlite": "SQLite (WAL)", "postgresql": "PostgreSQL 15"}[backend]
    report.add(f"### {name}: {finished:,} finished runs beside {LIVE:,} live ones")
    report.add()
    report.add(
        f"Seeded in {seeded_s:.0f} s ({finished / seeded_s:,.0f} runs/s). {ROUNDS} rounds, each "
        f"sample taken on the two ledgers in turns; per round and ledger {calls} calls, 7 "
        f"recoveries, {queries} `runs` and {queries} attention queries. Load "
        f"average before the prune: {load:.2f}."
    )
    report.add()
    report.add(
        f"| figure | live runs only (mean load {empty['load']:.1f}) | with the history "
        f"(mean load {full['load']:.1f}) | ratio |"
    )
    report.add("|---|---|---|---|")
    for key, label, unit in (
        ("call_p50", "call path (2 write-ahead commits) p50", "ms"),
        ("recovery", "recovery reads, median", "ms"),
        ("runs_p50", "`runs` query p50", "ms"),
        ("runs_p99", "`runs` query p99", "ms"),
        ("attention_p50", "attention query p50", "ms"),
        ("attention_p99", "attention query p99", "ms"),
    ):
        ratio = full[key] / empty[key] if empty[key] else float("nan")
        report.add(
            f"| {label} | {empty[key] * 1000:.2f} {unit} | {full[key] * 1000:.2f} {unit} | "
            f"**{ratio:.2f}** |"
        )
    per_run = (full_bytes - empty_bytes) / finished if finished else 0.0
    report.add(f"| bytes per finished run | | {per_run:,.0f} B | |")
    report.add(
        f"| prune rate while calls go on (over the time it ran) | | {pruned['rate']:,.0f} runs/s "
        f"({pruned['runs']:,} runs) | |"
    )
    baseline = pruned["without_p50"]
    ratio = pruned["during_p50"] / baseline if baseline else float("nan")
    report.add(
        f"| call path p50 during the prune vs without, in turns | {baseline * 1000:.2f} ms | "
        f"{pruned['during_p50'] * 1000:.2f} ms ({pruned['calls']:,} calls) | "
        f"**{ratio:.2f}** |"
    )
    if path is not None:
        returned = pruned["pages"] * psize
        report.add(
            f"| handed back by the incremental vacuum after the prune | | "
            f"{returned / 1e6:,.1f} MB | |"
        )
    report.add(
        f"| size: live runs only; with the history; after the prune (and the calls made "
        f"meanwhile) | {empty_bytes / 1e6:,.1f} MB | {full_bytes / 1e6:,.1f} MB; "
        f"{after_bytes / 1e6:,.1f} MB | |"
    )
    report.add()


#: The sizes ``make bench`` measures, small enough to seed and prune within minutes on a
#: 2-core machine shared with other work; section 17 states the larger sizes and their command.
SQLITE_FINISHED = 100_000
PG_FINISHED = 20_000


def bench_section(quick: bool, report: Report) -> None:
    """Section 16 of ``make bench``."""
    sqlite, pg, calls = (2_000, 1_000, 200) if quick else (SQLITE_FINISHED, PG_FINISHED, 1_000)
    report.add("## 16. A long history: finished runs beside live ones")
    report.add()
    report.add(
        "Each figure is the same operation measured on the same ledger with only its live runs, "
        "then after the finished runs were seeded in bulk (each: one call, one completed task, "
        "five events); the call path is the ledger's two write-ahead commits of a bridged call. "
        "The prune runs the default policy's batches (50 runs, each followed by a pause three "
        "times its own time) in a thread while calls go on back to back in another, in turns: "
        "a block of calls with the prune running, one with it held between its batches."
    )
    report.add()
    queries = 70 if quick else QUERY_SAMPLES  # a quick run shows the shape, not a p99
    bench_history("sqlite", sqlite, calls, report, queries=queries)
    bench_history("postgresql", pg, calls, report, queries=queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=SQLITE_FINISHED)
    parser.add_argument("--pg-finished", type=int, default=None)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument(
        "--prune-runs", type=int, default=None, help="prune at most this many (default: all)"
    )
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    args = parser.parse_args(argv)
    command = "python -m bench.history " + " ".join(argv if argv is not None else sys.argv[1:])
    report = Report(command.strip())
    report.add(f"Command: `{report.command}`. Machine: {machine()}.")
    report.add(provenance(REPO))
    report.add(f"Load average at the start: {os.getloadavg()[0]:.2f}.")
    report.add()
    if args.backend in ("sqlite", "both"):
        bench_history("sqlite", args.finished, args.calls, report, args.prune_runs)
    if args.backend in ("postgresql", "both"):
        pg = args.pg_finished or PG_FINISHED
        bench_history("postgresql", pg, args.calls, report, args.prune_runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
