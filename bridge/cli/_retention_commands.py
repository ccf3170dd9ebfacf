"""The operator CLI's retention commands: ``prune``, ``export``, ``import`` and ``db vacuum``.

``prune`` and ``export`` take the policy on the command line (the CLI has no settings file):
``--older-than-days`` and/or ``--keep``, with ``--min-age-days`` (default 1) as the floor. They
run in short batches, so a bridge may keep serving the same ledger meanwhile.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from bridge._ledger.retention.archive import ArchiveError
from bridge._ledger.retention.policy import RetentionPolicy
from bridge._ledger.retention.prune import Prune, PruneReport
from bridge._ledger.retention.restore import import_archive
from bridge._ledger.retention.vacuum import free_pages, incremental, return_space, vacuum_full
from bridge._ledger.store import Ledger
from bridge.cli._context import (
    CliError,
    JsonOpt,
    open_ledger,
    out_console,
    print_json,
    run_command,
    safe_url,
    settings_of,
)

OlderThan = Annotated[
    float | None,
    typer.Option("--older-than-days", min=0, help="Remove finished runs unchanged for DAYS."),
]
Keep = Annotated[
    int | None,
    typer.Option("--keep", min=0, help="Keep at most N finished runs, newest first."),
]
MinAge = Annotated[
    float,
    typer.Option("--min-age-days", min=0, help="Never remove a run changed within DAYS."),
]
Batch = Annotated[int, typer.Option("--batch", min=1, help="Runs per transaction.")]


def _policy(
    older_than: float | None, keep: int | None, min_age: float, batch: int
) -> RetentionPolicy:
    if older_than is None and keep is None:
        raise CliError("say what goes: --older-than-days DAYS and/or --keep N")
    return RetentionPolicy(
        max_age_days=older_than, keep_runs=keep, min_age_days=min_age, batch_runs=batch
    )


def _run(
    ledger: Ledger, principal: str, policy: RetentionPolicy, *, dry_run: bool, archive: Path | None
) -> PruneReport:
    job = Prune(ledger, principal, policy, dry_run=dry_run, archive=archive)
    while job.step():
        time.sleep(job.pause_s)  # let a bridge on the same ledger write between batches
    if job.report.runs and not job.report.dry_run:
        job.report.pages_freed = return_space(ledger.engine)
    return job.report


def _print(report: PruneReport, as_json: bool, archive: Path | None) -> None:
    if as_json:
        data = report.record()
        data["archive"] = None if archive is None else str(archive)
        print_json(data)
        return
    out = out_console()
    verb = "would remove" if report.dry_run else "removed"
    out.print(f"{verb} {report.runs} finished runs of {report.principal}", highlight=False)
    for ref in report.sample:
        out.print(f"  {ref}", highlight=False, markup=False)
    if report.runs > len(report.sample):
        out.print(f"  … and {report.runs - len(report.sample)} more", highlight=False)
    if report.unresolved:
        out.print(
            f"kept {report.unresolved} ended runs holding a call of unknown outcome without a "
            "final verdict",
            highlight=False,
        )
    if archive is not None:
        out.print(f"archived to {archive} ({report.archived_bytes} bytes)", highlight=False)
    if report.rows:
        rows = ", ".join(f"{table}: {n}" for table, n in report.rows.items() if n)
        out.print(f"rows: {rows}", highlight=False, markup=False)


def prune(
    ctx: typer.Context,
    older_than: OlderThan = None,
    keep: Keep = None,
    min_age: MinAge = 1.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Remove nothing; show what would go.")
    ] = False,
    archive: Annotated[
        Path | None,
        typer.Option("--archive", help="Append what is removed to FILE first (gzip JSON Lines)."),
    ] = None,
    batch: Batch = 50,
    as_json: JsonOpt = False,
) -> None:
    """Remove the principal's finished runs (never open, lost or unresolved ones)."""
    bounds = (older_than, keep, min_age, batch)
    _prune_command(ctx, bounds, dry_run=dry_run, archive=archive, as_json=as_json)


def export(
    ctx: typer.Context,
    archive: Annotated[Path, typer.Argument(help="The archive to append to (gzip JSON Lines).")],
    older_than: OlderThan = None,
    keep: Keep = None,
    min_age: MinAge = 1.0,
    batch: Batch = 50,
    as_json: JsonOpt = False,
) -> None:
    """Write what `prune` with the same options would remove to ARCHIVE; remove nothing."""
    bounds = (older_than, keep, min_age, batch)
    _prune_command(ctx, bounds, dry_run=True, archive=archive, as_json=as_json)


def _prune_command(
    ctx: typer.Context,
    bounds: tuple[float | None, int | None, float, int],
    *,
    dry_run: bool,
    archive: Path | None,
    as_json: bool,
) -> None:
    def body() -> None:
        policy = _policy(*bounds)
        settings = settings_of(ctx)
        principal = settings.require_principal()
        with open_ledger(settings) as ledger:
            report = _run(ledger, principal, policy, dry_run=dry_run, archive=archive)
        _print(report, as_json, archive)

    run_command(body)


def import_(
    ctx: typer.Context,
    archive: Annotated[Path, typer.Argument(help="An archive `export` or `prune` wrote.")],
    as_json: JsonOpt = False,
) -> None:
    """Restore the principal's runs from ARCHIVE (runs already in the ledger are left alone)."""

    def body() -> None:
        settings = settings_of(ctx)
        principal = settings.require_principal()
        if not archive.is_file():
            raise CliError(f"no archive at {archive}")
        with open_ledger(settings) as ledger:
            try:
                report = import_archive(ledger, principal, archive)
            except ArchiveError as exc:
                raise CliError(str(exc)) from exc
        if as_json:
            print_json(report.record())
            return
        out_console().print(
            f"imported {report.runs} runs of {principal} ({report.skipped} already there)",
            highlight=False,
        )

    run_command(body)


def db_vacuum(
    ctx: typer.Context,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Rebuild the SQLite file (writers wait throughout: stop the bridge first); "
            "makes a ledger created before retention incremental.",
        ),
    ] = False,
) -> None:
    """Hand a SQLite ledger's free pages back to the file system."""

    def body() -> None:
        settings = settings_of(ctx)
        url = settings.require_db()
        with open_ledger(settings) as ledger:
            engine = ledger.engine
            if engine.dialect.name != "sqlite":
                out_console().print(
                    "PostgreSQL: autovacuum makes deleted rows' space reusable; nothing to do",
                    highlight=False,
                )
                return
            before = free_pages(engine)
            if full:
                vacuum_full(engine)
                done = f"rebuilt: {before} free pages returned, incremental from now on"
            elif incremental(engine):
                done = f"{return_space(engine)} of {before} free pages returned"
            else:
                done = (
                    f"{before} free pages are reused by later writes; this ledger predates "
                    "incremental vacuum: run `bridge db vacuum --full` once with the bridge stopped"
                )
        out_console().print(f"ledger {safe_url(url)}: {done}", highlight=False, markup=False)

    run_command(body)
