"""What a long history costs (``python -m bench.history``; docs/benchmarks.md section 16).

One ledger is measured twice in the same run: with only its live runs, then after finished runs
are seeded beside them in bulk (each with one call, one completed task and five events, as a
short bridged call leaves). Each figure is the same operation at both sizes, as a ratio:

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
import json
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import insert, text

from bench.common import Report, machine, percentile, provenance
from bridge._ledger._base import DISPATCHES, EVENTS, RUNS, TASKS
from bridge._ledger.retention.policy import RetentionPolicy
from bridge._ledger.retention.prune import Prune
from bridge._ledger.retention.vacuum import return_space
from bridge._ledger.store import Ledger, TenantLedger
from bridge._lifecycle import DispatchState, OuterStatus, TaskStatus

REPO = Path(__file__).resolve().parents[1]
PRINCIPAL = "acme"
ENDPOINT = "http://127.0.0.1:9/mcp"
LIVE = 1_000
CHUNK = 2_000
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


def _finished_rows(start: int, count: int, first_ms: int) -> dict[str, list[dict[str, Any]]]:
    runs, calls, tasks, events = [], [], [], []
    for i in range(start, start + count):
        at_ms = first_ms + i  # one run ending each millisecond
        run, op, task = f"run_h{i:09d}", f"op_h{i:09d}", f"tk_h{i:09d}"
        base = {"principal": PRINCIPAL, "created_at_ms": at_ms, "updated_at_ms": at_ms}
        runs.append(
            {
                **base,
                "ref": run,
                "uhp_server": "local:bench",
                "response_id": f"resp_h{i}",
                "session_id": f"hsess_h{i}",
                "harness_id": "chrn_b",
                "status": "completed",
                "event_seq": 5,
                "result_truncated": None,
            }
            | {"result_truncated": None}
        )
        runs[-1].pop("result_truncated")
        calls.append(
            {
                **base,
                "ref": op,
                "run_ref": run,
                "operation_id": f"opid-h{i}",
                "server_endpoint": ENDPOINT,
                "server_name": "reports",
                "tool_name": "report",
                "args_digest": "0" * 64,
                "state": "task",
                "result_truncated": False,
                "task_ref": task,
            }
        )
        tasks.append(
            {
                **base,
                "ref": task,
                "run_ref": run,
                "op_ref": op,
                "server_endpoint": ENDPOINT,
                "server_name": "reports",
                "tool_name": "report",
                "args_digest": "0" * 64,
                "task_id": f"hist-{i}-{secrets.token_hex(8)}",
                "status": "completed",
                "terminal_at_ms": at_ms,
                "outcome_truncated": False,
                "result_json": json.dumps(
                    {"content": [{"type": "text", "text": f"report {i} ready"}]}
                ),
            }
        )
        for seq, kind in enumerate(
            ("run.registered", "call.sent", "task.created", "task.terminal", "outer.terminal"), 1
        ):
            payload = json.dumps(
                {
                    "type": kind,
                    "seq": seq,
                    "run_ref": run,
                    "at_ms": at_ms,
                    "task_ref": task,
                    "tool": "report",
                    "server": "reports",
                }
            )
            events.append(
                {
                    "principal": PRINCIPAL,
                    "run_ref": run,
                    "seq": seq,
                    "type": kind,
                    "task_ref": task,
                    "payload_json": payload,
                    "at_ms": at_ms,
                }
            )
    return {"runs": runs, "calls": calls, "tasks": tasks, "events": events}


def seed_finished(ledger: Ledger, count: int, at_ms: int) -> float:
    """``count`` finished runs in bulk, ``at_ms`` old; the seconds it took."""
    started = time.monotonic()
    for start in range(0, count, CHUNK):
        rows = _finished_rows(start, min(CHUNK, count - start), at_ms)
        with ledger.engine.begin() as conn:
            conn.execute(insert(RUNS), rows["runs"])
            conn.execute(insert(DISPATCHES), rows["calls"])
            conn.execute(insert(TASKS), rows["tasks"])
            conn.execute(insert(EVENTS), rows["events"])
    if ledger.dialect.name == "postgresql":
        with ledger.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    return time.monotonic() - started


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
    tenant.reads.list_dispatches(states=[DispatchState.PENDING, DispatchState.SENT])
    tenant.reads.unacknowledged_runs()


def runs_query(tenant: TenantLedger) -> None:
    for run in tenant.reads.list_runs(limit=20):
        tenant.reads.list_tasks(run_ref=run.ref)
        tenant.reads.list_dispatches(run_ref=run.ref)


def attention_query(tenant: TenantLedger) -> None:
    tenant.reads.pending_input_requests()
    tenant.rounds.pending_call_inputs()
    tenant.reads.list_dispatches(states=[DispatchState.UNKNOWN])


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


def measure(ledger: Ledger, live_run: str, calls: int) -> dict[str, float]:
    tenant = ledger.for_principal(PRINCIPAL)
    call_path(tenant, live_run, 100)  # warm
    return {
        "call_p50": percentile(call_path(tenant, live_run, calls), 50),
        "recovery": percentile(timed(lambda: recovery_reads(tenant), 7), 50),
        "runs_p99": percentile(timed(lambda: runs_query(tenant), 200), 99),
        "attention_p99": percentile(timed(lambda: attention_query(tenant), 200), 99),
    }


def prune_while_calling(ledger: Ledger, live_run: str, calls: int) -> dict[str, float]:
    """Prune everything seeded in a thread while calls go on here."""
    tenant = ledger.for_principal(PRINCIPAL)
    policy = RetentionPolicy(max_age_days=1, min_age_days=1)
    job = Prune(ledger, PRINCIPAL, policy)
    done = threading.Event()
    timing: dict[str, float] = {}

    def pruner() -> None:
        started = time.monotonic()
        while job.step():
            time.sleep(policy.pause_s)
        timing["prune_s"] = time.monotonic() - started
        done.set()

    thread = threading.Thread(target=pruner)
    thread.start()
    during: list[float] = []
    while not done.is_set():
        during.extend(call_path(tenant, live_run, 50))
    thread.join()
    pages = return_space(ledger.engine)
    return {
        "runs": job.report.runs,
        "rate": job.report.runs / timing["prune_s"],
        "during_p50": percentile(during[: max(1, len(during))], 50),
        "calls": len(during),
        "pages": pages,
    }


@contextmanager
def ledger_at(backend: str, workdir: Path) -> Iterator[tuple[Ledger, Path | None]]:
    if backend == "sqlite":
        path = workdir / "history.db"
        ledger = Ledger.open(path)
        try:
            yield ledger, path
        finally:
            ledger.close()
        return
    from bench.scale_out import postgres_database

    with postgres_database() as url:
        ledger = Ledger.open(url)
        try:
            yield ledger, None
        finally:
            ledger.close()


def bench_history(backend: str, finished: int, calls: int, report: Report) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-history-") as tmp,
        ledger_at(backend, Path(tmp)) as (ledger, path),
    ):
        tenant = ledger.for_principal(PRINCIPAL)
        seed_live(tenant)
        caller = tenant.runs.open_run(
            "local:bench",
            response_id="resp_caller",
            session_id="hsess_c",
            harness_id="chrn_b",
            status=OuterStatus.IN_PROGRESS,
        ).ref
        empty_bytes = size_bytes(ledger, path)
        empty = measure(ledger, caller, calls)
        seeded_s = seed_finished(ledger, finished, ledger.clock() - 30 * DAY_MS)
        full_bytes = size_bytes(ledger, path)
        full = measure(ledger, caller, calls)
        baseline = percentile(call_path(tenant, caller, calls), 50)
        pruned = prune_while_calling(ledger, caller, calls)
        after_bytes = size_bytes(ledger, path)
        psize = page_size(ledger) if path is not None else 0
    name = {"sqlite": "SQLite (WAL)", "postgresql": "PostgreSQL 15"}[backend]
    report.add(f"### {name}: {finished:,} finished runs beside {LIVE:,} live ones")
    report.add()
    report.add(f"Seeded in {seeded_s:.0f} s. Call path: {calls} calls per figure.")
    report.add()
    report.add("| figure | live runs only | with the history | ratio |")
    report.add("|---|---|---|---|")
    for key, label, unit in (
        ("call_p50", "call path (2 write-ahead commits) p50", "ms"),
        ("recovery", "recovery reads, median of 7", "ms"),
        ("runs_p99", "`runs` query p99", "ms"),
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
        f"| prune rate while calls go on | | {pruned['rate']:,.0f} runs/s "
        f"({pruned['runs']:,} runs) | |"
    )
    ratio = pruned["during_p50"] / baseline if baseline else float("nan")
    report.add(
        f"| call path p50 during the prune vs without | {baseline * 1000:.2f} ms | "
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


#: The sizes ``make bench`` measures: the largest that seed and prune within minutes on a
#: 2-core machine shared with other work (a million finished runs does not: see section 16).
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
        "The prune runs the default policy's batches (50 runs, 0.02 s apart) in a thread while "
        "calls go on back to back in another."
    )
    report.add()
    bench_history("sqlite", sqlite, calls, report)
    bench_history("postgresql", pg, calls, report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=SQLITE_FINISHED)
    parser.add_argument("--pg-finished", type=int, default=None)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    args = parser.parse_args(argv)
    command = "python -m bench.history " + " ".join(argv if argv is not None else sys.argv[1:])
    report = Report(command.strip())
    report.add(f"Command: `{report.command}`. Machine: {machine()}.")
    report.add(provenance(REPO))
    report.add(f"Load average at the start: {os.getloadavg()[0]:.2f}.")
    report.add()
    if args.backend in ("sqlite", "both"):
        bench_history("sqlite", args.finished, args.calls, report)
    if args.backend in ("postgresql", "both"):
        bench_history("postgresql", args.pg_finished or PG_FINISHED, args.calls, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
