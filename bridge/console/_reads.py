"""What the console reads, through :meth:`bridge.Bridge.read` (scoped to the signed-in
principal, as the gateway's reads are): the runs list (search and filter), a run's snapshot
and timeline (the CLI's model)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from bridge._facade import Bridge
from bridge._ledger.reader import LedgerReader
from bridge.cli._records import RunSnapshot, load_snapshot
from bridge.cli._timeline import Timeline, build_timeline
from bridge.console._pages import RunRow

RUNS_SCANNED = 500  # the search looks at this many most recently updated runs


@dataclass(frozen=True, slots=True)
class RunsQuery:
    """The runs list's search text and status filter (``any``, ``open`` or a status)."""

    text: str = ""
    status: str = "any"


async def run_snapshot(
    bridge: Bridge, principal: str, run_ref: str
) -> tuple[RunSnapshot, Timeline]:
    """The run as recorded now and its timeline (``NotFound`` for another's or none)."""
    snapshot = await bridge.read(principal, lambda r: load_snapshot(r, run_ref))
    return snapshot, build_timeline(snapshot)


async def matching_runs(
    bridge: Bridge, principal: str, query: RunsQuery, waiting: Mapping[str, int]
) -> tuple[list[RunRow], int]:
    """The runs matching ``query`` among the most recently updated, and how many were looked
    at; ``waiting``: how many attention items each run has."""
    return await bridge.read(principal, partial(_matching_runs, query=query, waiting=waiting))


def _matching_runs(
    reader: LedgerReader, query: RunsQuery, waiting: Mapping[str, int]
) -> tuple[list[RunRow], int]:
    runs = reader.runs(limit=RUNS_SCANNED, open_only=query.status == "open")
    needle = query.text.strip().lower()
    rows = []
    for run in runs:
        status = run.status.value if run.status is not None else "pending"
        if query.status not in ("any", "open") and status != query.status:
            continue
        tasks = reader.tasks(run.ref)
        if needle:
            haystack = [run.ref, run.response_id, run.session_id, run.uhp_server, run.harness_id]
            haystack += [t.ref for t in tasks] + [t.tool_name for t in tasks]
            haystack += [t.server_label for t in tasks]
            if not any(needle in (value or "").lower() for value in haystack):
                continue
        rows.append(
            RunRow(
                run=run,
                tasks=len(tasks),
                open_tasks=sum(1 for t in tasks if t.is_open),
                attention=waiting.get(run.ref, 0),
            )
        )
    return rows, len(runs)
