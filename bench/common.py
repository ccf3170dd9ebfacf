"""Shared bench plumbing: the report, percentiles, machine description, the results file."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bridge._ledger.store import TenantLedger
from bridge._lifecycle import TaskStatus

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class Report:
    command: str
    lines: list[str] = field(default_factory=list)

    def add(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        sqlite = subprocess.run(
            ["python3", "-c", "import sqlite3;print(sqlite3.sqlite_version)"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        sqlite = "?"
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}, SQLite {sqlite}"
    )


def provenance(repo: Path) -> str:
    """When the run started, at which commit (and whether the tree had uncommitted changes),
    and the machine's load when it started: the facts a reader needs to compare two runs."""
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = _git(repo, "rev-parse", "--short", "HEAD") or "unknown commit"
    # The report itself does not count: a run before this one may have rewritten it.
    changed = _git(
        repo, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/benchmarks.md"
    )
    at = f"`{commit}`" + (" with uncommitted changes" if changed else "")
    try:
        load = f"load average {os.getloadavg()[0]:.2f} at the start"
    except OSError:
        load = "load average unknown"
    return f"Run started {started} at {at}; {load}."


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def register_open_tasks(
    tenant: TenantLedger, run_ref: str, count: int, interval_ms: int, *, endpoint: str = "x"
) -> None:
    """``count`` open handles in one run, as the fast Tasks server names them
    (``bench-<interval_ms>-<n>``: it answers each with that poll interval)."""
    for n in range(count):
        op = tenant.calls.begin_dispatch(
            run_ref,
            server_endpoint=endpoint,
            server_name="fast",
            tool_name="park",
            arguments={"n": n},
            sent=True,
        )
        tenant.calls.record_task_created(
            op.ref,
            task_id=f"bench-{interval_ms}-{n}",
            status=TaskStatus.WORKING,
            ttl_ms=None,
            poll_interval_ms=interval_ms,
        )


def stat_fields(pid: int | str) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (field 3 onward): ``[1]`` is the parent pid,
    ``[11]``/``[12]`` user and system CPU in clock ticks."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(fields: list[str]) -> float:
    """User + system CPU seconds of :func:`stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of_processes(roots: Sequence[int]) -> float:
    """CPU seconds (user + system) used so far by ``roots`` and their direct children (a
    PostgreSQL postmaster's backends, say), from ``/proc``; processes gone meanwhile count 0."""
    wanted, total = set(roots), 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = stat_fields(entry.name)
        except OSError:
            continue
        if int(entry.name) in wanted or int(fields[1]) in wanted:  # the pid, or its parent
            total += cpu_seconds(fields)
    return total
