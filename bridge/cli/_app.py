"""``bridge``: the operator CLI over a bridge ledger (typer + rich).

Every read is scoped to ``--principal``: a foreign principal sees nothing, exactly as the
ledger API behaves. Raw MCP task ids, server input keys and credentials are never printed.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from bridge._ledger.reader import LedgerReader
from bridge._ledger.reads.call_states import calls_of
from bridge._ledger.schema import migrate
from bridge._ledger.schema.engine import create_ledger_engine
from bridge._mcp.config_file import credential_env_name
from bridge.cli._context import (
    FollowForOpt,
    JsonOpt,
    RunArg,
    Settings,
    out_console,
    print_json,
    reader_scope,
    run_command,
    safe_url,
    settings_of,
)
from bridge.cli._html_timeline import render_html
from bridge.cli._mcp_commands import (
    answer,
    cancel_task,
    load_mcp_config,
    recover,
)
from bridge.cli._operator_commands import ack, attention, close_run, resolve
from bridge.cli._records import (
    Redactor,
    event_record,
    event_task_ref,
    load_snapshot,
    run_record,
    run_verdicts,
    task_counts,
)
from bridge.cli._retention_commands import db_vacuum, export, import_, prune
from bridge.cli._tables import add_event_row, events_table, run_tree, runs_table
from bridge.cli._timeline import build_timeline, timeline_renderable

# The MCP config helpers are part of the CLI's surface (tests and embedders import them here).
__all__ = ["app", "credential_env_name", "db_app", "load_mcp_config", "main"]

FOLLOW_POLL_S = 0.5

app = typer.Typer(
    name="bridge",
    help="Operator CLI for the UHP <-> MCP Tasks bridge ledger.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Ledger schema management.", no_args_is_help=True)
app.add_typer(db_app, name="db")


# -- global options -------------------------------------------------------------------------------
@app.callback()
def main_callback(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            envvar="BRIDGE_DB",
            help="Ledger: a SQLite file path or a postgresql:// URL.",
            show_envvar=True,
        ),
    ] = None,
    principal: Annotated[
        str | None,
        typer.Option(
            "--principal",
            envvar="BRIDGE_PRINCIPAL",
            help="Principal/tenant every read and write is scoped to.",
            show_envvar=True,
        ),
    ] = None,
) -> None:
    ctx.obj = Settings(db=db, principal=principal)


# -- runs --------------------------------------------------------------------------------------
@app.command()
def runs(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="How many runs.")] = 20,
    open_only: Annotated[
        bool, typer.Option("--open", help="Only runs not yet terminal (outer status).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Recent outer responses with their nested-task counts."""

    def body() -> None:
        with reader_scope(ctx) as reader:
            rows = []
            redactor = Redactor()
            for run in reader.runs(limit=limit, open_only=open_only):
                tasks = reader.tasks(run.ref)
                for task in tasks:
                    redactor.add(task)
                dispatches = reader.calls(run.ref)
                verdicts = run_verdicts(reader, dispatches)
                rows.append(
                    {
                        "run": run_record(run, calls_of(dispatches, tasks, verdicts)),
                        "counts": task_counts(tasks, dispatches, verdicts),
                    }
                )
            rows = redactor.value(rows)
        if as_json:
            print_json({"principal": settings_of(ctx).principal, "runs": rows})
            return
        if not rows:
            out_console().print("no runs for this principal", style="dim")
            return
        out_console().print(runs_table(rows))

    run_command(body)


# -- show --------------------------------------------------------------------------------------
@app.command()
def show(
    ctx: typer.Context,
    run: RunArg,
    as_json: JsonOpt = False,
) -> None:
    """A run as a tree: outer response -> tool calls -> inner tasks -> pending inputs."""

    def body() -> None:
        with reader_scope(ctx) as reader:
            snapshot = load_snapshot(reader, run)
        if as_json:
            print_json(snapshot.record())
            return
        out_console().print(run_tree(snapshot))

    run_command(body)


# -- timeline --------------------------------------------------------------------------------
@app.command()
def timeline(
    ctx: typer.Context,
    run: RunArg,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write a self-contained HTML/SVG timeline to FILE."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The outer and inner lifecycles side by side (times relative to the first event)."""

    def body() -> None:
        with reader_scope(ctx) as reader:
            snapshot = load_snapshot(reader, run)
        model = build_timeline(snapshot)
        if html is not None:
            html.parent.mkdir(parents=True, exist_ok=True)
            html.write_text(render_html(model), encoding="utf-8")
        if as_json:
            data = model.record()
            if html is not None:
                data["html"] = str(html)
            print_json(data)
            return
        out_console().print(timeline_renderable(model))
        if html is not None:
            out_console().print(f"wrote {html}", highlight=False, markup=False)

    run_command(body)


# -- events ------------------------------------------------------------------------------------
@app.command()
def events(
    ctx: typer.Context,
    run: RunArg,
    after: Annotated[int, typer.Option("--after", min=0, help="Only events with seq > N.")] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep polling for new events until Ctrl-C.")
    ] = False,
    follow_for: FollowForOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The run's events in order. With --json: an array, or one object per line with --follow."""

    def body() -> None:
        with reader_scope(ctx) as reader:
            reader.run(run)  # NotFound for a foreign or missing run
            redactor = Redactor(reader.tasks(run))
            batch = reader.events(run, after_seq=after)
            if not follow:
                if as_json:
                    print_json([redactor.value(event_record(e)) for e in batch])
                elif batch:
                    out_console().print(events_table(batch, redactor, None))
                else:
                    out_console().print(f"no events after seq {after}", style="dim")
                return
            _follow(reader, run, batch, after, redactor, as_json, follow_for)

    run_command(body)


def _follow(
    reader: LedgerReader,
    run: str,
    batch: list[Any],
    after: int,
    redactor: Redactor,
    as_json: bool,
    follow_for: float | None,
) -> None:
    out = out_console()
    last = after
    known_tasks = {t.ref for t in reader.tasks(run)}
    deadline = None if follow_for is None else time.monotonic() + follow_for

    def emit(items: list[Any]) -> None:
        nonlocal last
        for event in items:
            last = event.seq
            ref = event_task_ref(event)
            if ref is not None and ref not in known_tasks:
                # A task created while following: learn its raw id to keep it out of output.
                for task in reader.tasks(run):
                    if task.ref not in known_tasks:
                        known_tasks.add(task.ref)
                        redactor.add(task)
            if as_json:
                record = redactor.value(event_record(event))
                sys.stdout.write(json.dumps(record, default=str) + "\n")
                sys.stdout.flush()
            else:
                table = events_table([], redactor, None)
                add_event_row(table, event, redactor, None)
                table.show_header = False
                out.print(table)

    if not as_json:
        out.print(events_table([], redactor, None))  # the header once
    emit(batch)
    status_console = Console(stderr=True) if as_json else out
    try:
        with status_console.status(
            f"following {run} after seq {last} (Ctrl-C to stop)", spinner="dots"
        ) as status:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(FOLLOW_POLL_S)
                fresh = reader.events(run, after_seq=last)
                if fresh:
                    emit(fresh)
                status.update(f"following {run}: last seq {last} (Ctrl-C to stop)")
    except KeyboardInterrupt:
        pass
    if not as_json:
        out.print(f"stopped following {run} at seq {last}", style="dim", markup=False)


@app.command(
    "gateway",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def gateway(ctx: typer.Context) -> None:
    """Serve the bridge as an MCP server fronting the configured upstreams (see
    docs/guides/gateway.md): --config FILE --db URL [--host] [--port] [--port-file], or
    --stdio [--principal P] for one client over stdin/stdout."""
    from bridge.gateway.__main__ import main as gateway_main  # loads the MCP server stack

    gateway_main(ctx.args)


@app.command(
    "console",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def console(ctx: typer.Context) -> None:
    """Serve the operator web console over the ledger (see docs/guides/operate-the-console.md):
    --db URL --tokens FILE [--mcp-config FILE] [--listen HOST:PORT] [--port-file F]."""
    from bridge.console.__main__ import main as console_main  # loads the web and MCP stack

    console_main(ctx.args)


# -- MCP-side commands (after events: the help lists commands in this order) ---------------------
app.command()(recover)
app.command("cancel-task")(cancel_task)
app.command()(answer)
# -- the operator's loop: what waits for a person, then acting on it ------------------------------
app.command()(attention)
app.command()(resolve)
app.command()(ack)
app.command("close-run")(close_run)
# -- retention: finished runs out of the ledger, archived first -------------------------------
app.command()(prune)
app.command()(export)
app.command("import")(import_)
db_app.command("vacuum")(db_vacuum)


# -- db -------------------------------------------------------------------------------------------
@db_app.command("upgrade")
def db_upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Option("--revision", help="Target revision.")] = "head",
) -> None:
    """Run the Alembic migrations on the ledger and print the revision."""

    def body() -> None:
        url = settings_of(ctx).require_db()
        engine = create_ledger_engine(url)
        try:
            before = migrate.current_revision(engine)
            migrate.upgrade(engine, revision)
            after = migrate.current_revision(engine)
        finally:
            engine.dispose()
        change = "already at" if before == after else f"upgraded {before or '<empty>'} ->"
        out_console().print(
            f"ledger {safe_url(url)}: {change} {after}", highlight=False, markup=False
        )

    run_command(body)


def main() -> None:
    """Console-script entry point (``bridge = "bridge.cli._app:main"``)."""
    try:
        app(prog_name="bridge")
    finally:
        # Nothing is collected after this: the exit no longer walks the whole object graph of
        # the imported stack (MCP SDK, pydantic models, SQLAlchemy), which took ~0.9 s of
        # every command's run on these machines.
        gc.freeze()
