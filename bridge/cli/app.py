"""``bridge``: the operator CLI over a bridge ledger (typer + rich).

Every read is scoped to ``--principal``: a foreign principal sees nothing, exactly as the
ledger API behaves. Raw MCP task ids, server input keys and credentials are never printed.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import typer
from rich.console import Console
from rich.text import Text
from sqlalchemy import inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from bridge.cli import render
from bridge.cli.html_timeline import render_html
from bridge.errors import BridgeError, NotFound
from bridge.ledger import migrate
from bridge.ledger.engine import create_ledger_engine, normalize_url
from bridge.ledger.store import Ledger, TenantLedger
from bridge.mcp.servers import McpServerConfig

FOLLOW_POLL_S = 0.5
REQUIRED_TABLE = "bridge_outer_responses"

app = typer.Typer(
    name="bridge",
    help="Operator CLI for the UHP <-> MCP Tasks bridge ledger.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Ledger schema management.", no_args_is_help=True)
app.add_typer(db_app, name="db")


class CliError(Exception):
    """A clear, expected failure: printed as one line, exit status 1 (no traceback)."""


@dataclass(slots=True)
class Settings:
    db: str | None
    principal: str | None

    def require_db(self) -> str:
        if not self.db:
            raise CliError("no ledger given: use --db URL or set BRIDGE_DB")
        return self.db

    def require_principal(self) -> str:
        if not self.principal:
            raise CliError("no principal given: use --principal P or set BRIDGE_PRINCIPAL")
        return self.principal


def _out() -> Console:
    return Console(soft_wrap=False)


def _err() -> Console:
    return Console(stderr=True)


def _settings(ctx: typer.Context) -> Settings:
    obj = ctx.find_root().obj
    assert isinstance(obj, Settings)
    return obj


def _fail(message: str) -> NoReturn:
    _err().print(Text.assemble(("error: ", "bold red"), message), highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def safe_url(url: str) -> str:
    """The URL without its password (for messages); a plain file path as given."""
    if "://" not in url:
        return url
    try:
        return make_url(normalize_url(url)).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


@contextmanager
def open_ledger(settings: Settings) -> Iterator[Ledger]:
    """Open an existing, migrated ledger without changing it; clear errors otherwise."""
    url = settings.require_db()
    full = normalize_url(url)
    parsed = make_url(full)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not Path(database).exists():
            raise CliError(
                f"no ledger at {safe_url(url)} (file not found); create it with "
                f"`bridge --db {safe_url(url)} db upgrade`"
            )
    try:
        ledger = Ledger.open(url, upgrade=False)
    except SQLAlchemyError as exc:
        raise CliError(f"cannot open ledger at {safe_url(url)}: {type(exc).__name__}") from exc
    try:
        try:
            tables = set(inspect(ledger.engine).get_table_names())
        except SQLAlchemyError as exc:
            raise CliError(f"cannot read ledger at {safe_url(url)}: {type(exc).__name__}") from exc
        if REQUIRED_TABLE not in tables:
            raise CliError(
                f"the ledger at {safe_url(url)} has no bridge tables; "
                f"run `bridge --db {safe_url(url)} db upgrade` first"
            )
        yield ledger
    finally:
        ledger.close()


@contextmanager
def tenant_scope(ctx: typer.Context) -> Iterator[TenantLedger]:
    settings = _settings(ctx)
    principal = settings.require_principal()
    with open_ledger(settings) as ledger:
        yield ledger.for_principal(principal)


def _expected(exc: BaseException) -> BaseException:
    """The expected error inside a task group's exception group, if that is all it holds."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_expected(e) for e in exc.exceptions]
        known = [e for e in leaves if isinstance(e, CliError | BridgeError | SQLAlchemyError)]
        if known and len(known) == len(leaves):
            return known[0]
    return exc


def _run_command(body: Any) -> None:
    """Run a command body, turning expected failures into one-line errors."""
    try:
        try:
            body()
        except BaseExceptionGroup as group:
            inner = _expected(group)
            if inner is group:
                raise
            raise inner from None
    except CliError as exc:
        _fail(str(exc))
    except NotFound as exc:
        _fail(f"{exc.kind} {exc.ref!r} not found for this principal")
    except BridgeError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    except SQLAlchemyError as exc:
        _fail(f"ledger error ({type(exc).__name__}); if the schema is old, run `bridge db upgrade`")


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


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


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
        with tenant_scope(ctx) as tenant:
            rows = []
            redactor = render.Redactor()
            for run in tenant.list_runs(limit=limit, open_only=open_only):
                tasks = tenant.list_tasks(run_ref=run.ref)
                for task in tasks:
                    redactor.add(task)
                dispatches = tenant.list_dispatches(run_ref=run.ref)
                rows.append(
                    {
                        "run": render.run_record(run),
                        "counts": render.task_counts(tasks, dispatches),
                    }
                )
            rows = redactor.value(rows)
        if as_json:
            _print_json({"principal": tenant.principal, "runs": rows})
            return
        if not rows:
            _out().print("no runs for this principal", style="dim")
            return
        _out().print(render.runs_table(rows))

    _run_command(body)


# -- show --------------------------------------------------------------------------------------
@app.command()
def show(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="Run reference (run_…).")],
    as_json: JsonOpt = False,
) -> None:
    """A run as a tree: outer response -> tool calls -> inner tasks -> pending inputs."""

    def body() -> None:
        with tenant_scope(ctx) as tenant:
            snapshot = render.load_snapshot(tenant, run)
        if as_json:
            _print_json(snapshot.record())
            return
        _out().print(render.run_tree(snapshot))

    _run_command(body)


# -- timeline --------------------------------------------------------------------------------
@app.command()
def timeline(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="Run reference (run_…).")],
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write a self-contained HTML/SVG timeline to FILE."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The outer and inner lifecycles side by side (times relative to the first event)."""

    def body() -> None:
        with tenant_scope(ctx) as tenant:
            snapshot = render.load_snapshot(tenant, run)
        model = render.build_timeline(snapshot)
        if html is not None:
            html.parent.mkdir(parents=True, exist_ok=True)
            html.write_text(render_html(model), encoding="utf-8")
        if as_json:
            data = model.record()
            if html is not None:
                data["html"] = str(html)
            _print_json(data)
            return
        _out().print(render.timeline_renderable(model))
        if html is not None:
            _out().print(f"wrote {html}", highlight=False, markup=False)

    _run_command(body)


# -- events ------------------------------------------------------------------------------------
@app.command()
def events(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="Run reference (run_…).")],
    after: Annotated[int, typer.Option("--after", min=0, help="Only events with seq > N.")] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep polling for new events until Ctrl-C.")
    ] = False,
    follow_for: Annotated[
        float | None,
        typer.Option("--follow-for", hidden=True, help="Stop following after SECONDS."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The run's events in order. With --json: an array, or one object per line with --follow."""

    def body() -> None:
        with tenant_scope(ctx) as tenant:
            tenant.get_run(run)  # NotFound for a foreign or missing run
            redactor = render.Redactor(tenant.list_tasks(run_ref=run))
            batch = tenant.events(run, after_seq=after)
            if not follow:
                if as_json:
                    _print_json([redactor.value(render.event_record(e)) for e in batch])
                elif batch:
                    _out().print(render.events_table(batch, redactor, None))
                else:
                    _out().print(f"no events after seq {after}", style="dim")
                return
            _follow(tenant, run, batch, after, redactor, as_json, follow_for)

    _run_command(body)


def _follow(
    tenant: TenantLedger,
    run: str,
    batch: list[Any],
    after: int,
    redactor: render.Redactor,
    as_json: bool,
    follow_for: float | None,
) -> None:
    out = _out()
    last = after
    known_tasks = {t.ref for t in tenant.list_tasks(run_ref=run)}
    deadline = None if follow_for is None else time.monotonic() + follow_for

    def emit(items: list[Any]) -> None:
        nonlocal last
        for event in items:
            last = event.seq
            ref = render.event_task_ref(event)
            if ref is not None and ref not in known_tasks:
                # A task created while following: learn its raw id to keep it out of output.
                for task in tenant.list_tasks(run_ref=run):
                    if task.ref not in known_tasks:
                        known_tasks.add(task.ref)
                        redactor.add(task)
            if as_json:
                record = redactor.value(render.event_record(event))
                sys.stdout.write(json.dumps(record, default=str) + "\n")
                sys.stdout.flush()
            else:
                table = render.events_table([], redactor, None)
                render.add_event_row(table, event, redactor, None)
                table.show_header = False
                out.print(table)

    if not as_json:
        out.print(render.events_table([], redactor, None))  # the header once
    emit(batch)
    status_console = Console(stderr=True) if as_json else out
    try:
        with status_console.status(
            f"following {run} after seq {last} (Ctrl-C to stop)", spinner="dots"
        ) as status:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(FOLLOW_POLL_S)
                fresh = tenant.events(run, after_seq=last)
                if fresh:
                    emit(fresh)
                status.update(f"following {run}: last seq {last} (Ctrl-C to stop)")
    except KeyboardInterrupt:
        pass
    if not as_json:
        out.print(f"stopped following {run} at seq {last}", style="dim", markup=False)


# -- MCP-side commands ----------------------------------------------------------------------------
def credential_env_name(ref: str) -> str:
    return "BRIDGE_CREDENTIAL_" + re.sub(r"[^A-Za-z0-9]", "_", ref).upper()


def resolve_credential(ref: str) -> str | None:
    return os.environ.get(credential_env_name(ref))


def load_mcp_config(path: Path) -> list[McpServerConfig]:
    """``{"mcpServers": [{"name", "url", "enabled", "auth": {"credential_ref"}}]}`` (a mapping
    of name -> entry is accepted too). Tokens are never in this file: only credential refs."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read MCP config {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CliError(
            f"MCP config {path} is not valid JSON: {exc.msg} (line {exc.lineno})"
        ) from exc
    entries = data.get("mcpServers") if isinstance(data, dict) else None
    if isinstance(entries, dict):
        entries = [{"name": name, **entry} for name, entry in entries.items()]
    if not isinstance(entries, list):
        raise CliError(f'MCP config {path}: expected {{"mcpServers": [...]}}')
    servers = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise CliError(f"MCP config {path}: server #{index} needs a string 'name'")
        auth = entry.get("auth") or {}
        if not isinstance(auth, dict):
            raise CliError(f"MCP config {path}: server {entry['name']!r}: 'auth' must be object")
        try:
            servers.append(
                McpServerConfig(
                    name=entry["name"],
                    url=entry.get("url"),
                    command=entry.get("command"),
                    args=tuple(entry.get("args") or ()),
                    env=entry.get("env"),
                    enabled=bool(entry.get("enabled", True)),
                    credential_ref=auth.get("credential_ref"),
                    retry_safe_tools=frozenset(entry.get("retry_safe_tools") or ()),
                )
            )
        except (TypeError, ValueError) as exc:
            raise CliError(f"MCP config {path}: {exc}") from exc
    return servers


McpConfigOpt = Annotated[
    Path,
    typer.Option(
        "--mcp-config",
        help='JSON {"mcpServers": [{"name", "url", "enabled", "auth": {"credential_ref"}}]}; '
        "tokens come from env BRIDGE_CREDENTIAL_<REF>.",
        exists=False,
    ),
]


def _bridge_for(ledger: Ledger, principal: str, servers: list[McpServerConfig]) -> Any:
    from bridge.facade import Bridge  # the MCP/UHP stack is only needed by these commands

    # No automatic recovery: a cancel or an answer must not settle another process's in-flight
    # calls. `bridge recover` runs recovery explicitly.
    return Bridge(
        ledger,
        principals=[principal],
        mcp_servers=servers,
        credentials=resolve_credential,
        recover_on_start=False,
    )


@app.command()
def recover(
    ctx: typer.Context,
    mcp_config: McpConfigOpt,
    wait: Annotated[
        float, typer.Option("--wait", min=0, help="Keep watching open tasks for SECONDS.")
    ] = 0.0,
    settle: Annotated[
        bool,
        typer.Option(
            "--settle/--no-settle",
            help="Mark dispatches left pending/sent as unknown outcome. Only safe when no other "
            "live process is dispatching for this principal.",
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Open a Bridge on the ledger, recover open work and print the recovery report."""

    def body() -> None:
        settings = _settings(ctx)
        principal = settings.require_principal()
        servers = load_mcp_config(mcp_config)
        with open_ledger(settings) as ledger:
            report, tasks = anyio.run(_recover, ledger, principal, servers, wait, settle)
        data = {
            "tasks_watched": report.tasks_watched,
            "dispatches_marked_unknown": report.dispatches_marked_unknown,
            "answers_to_redeliver": report.answers_to_redeliver,
            "cancels_to_resend": report.cancels_to_resend,
            "remote_runs_resumed": report.remote_runs_resumed,
            "served_runs_open": list(report.served_runs_open),
            "pending_inputs": [render.input_record(r) for r in report.pending_inputs],
            "waited_s": wait,
            "tasks": tasks,
        }
        if as_json:
            _print_json(data)
            return
        out = _out()
        out.print("[bold]Recovery report[/bold]")
        for key in (
            "tasks_watched",
            "dispatches_marked_unknown",
            "answers_to_redeliver",
            "cancels_to_resend",
            "remote_runs_resumed",
        ):
            out.print(f"  {key.replace('_', ' ')}: {data[key]}", highlight=False)
        out.print(f"  served runs open: {', '.join(data['served_runs_open']) or '-'}", markup=False)
        for request in data["pending_inputs"]:
            out.print(
                f"  pending input {request['input_ref']} on {request['task_ref']}: "
                f"{request['method']}",
                highlight=False,
                markup=False,
            )
        if tasks:
            out.print(f"[bold]Tasks after {wait:g}s[/bold]")
            for task in tasks:
                verdicts = " ".join(task["verdicts"])
                out.print(
                    f"  {task['task_ref']} {task['server']}.{task['tool']} {task['status']} "
                    f"{verdicts}",
                    highlight=False,
                    markup=False,
                )

    _run_command(body)


async def _recover(
    ledger: Ledger, principal: str, servers: list[McpServerConfig], wait: float, settle: bool
) -> tuple[Any, list[dict[str, Any]]]:
    tenant = ledger.for_principal(principal)
    async with _bridge_for(ledger, principal, servers) as bridge:
        report = await bridge.recover(settle_in_flight_dispatches=settle)
        watched = [t.ref for t in tenant.list_tasks(open_only=True)]
        if wait > 0:
            with _err().status(f"watching {len(watched)} open task(s) for {wait:g}s"):
                await anyio.sleep(wait)
    now = render.now_ms()
    tasks = [render.task_record(tenant.get_task(ref), [], now) for ref in watched]
    return report, tasks


@app.command("cancel-task")
def cancel_task(
    ctx: typer.Context,
    task: Annotated[str, typer.Argument(help="Task reference (tk_…).")],
    mcp_config: McpConfigOpt,
    as_json: JsonOpt = False,
) -> None:
    """Ask the task's server to cancel it (recorded first as intent)."""

    def body() -> None:
        settings = _settings(ctx)
        principal = settings.require_principal()
        servers = load_mcp_config(mcp_config)
        with open_ledger(settings) as ledger:
            view = ledger.for_principal(principal).get_task(task)
            if view.terminal_at_ms is not None:
                raise CliError(f"task {task} is already {view.status.value}; nothing to cancel")
            acknowledged = anyio.run(_cancel, ledger, principal, servers, task)
        if as_json:
            _print_json({"task_ref": task, "cancel_recorded": True, "acknowledged": acknowledged})
            return
        verdict = (
            "acknowledged"
            if acknowledged
            else "NOT acknowledged (the recorded intent is resent when a bridge recovers)"
        )
        _out().print(
            f"cancel requested for {task} (recorded as intent); server {verdict}. "
            "The task's status changes only when a poll observes it.",
            highlight=False,
            markup=False,
        )

    _run_command(body)


async def _cancel(
    ledger: Ledger, principal: str, servers: list[McpServerConfig], task_ref: str
) -> bool:
    async with _bridge_for(ledger, principal, servers) as bridge:
        result: bool = await bridge.cancel_task(principal, task_ref)
        return result


@app.command()
def answer(
    ctx: typer.Context,
    task: Annotated[str, typer.Argument(help="Task reference (tk_…).")],
    key: Annotated[str, typer.Argument(help="Input reference (in_…) from task.input_required.")],
    payload: Annotated[str, typer.Argument(metavar="JSON", help="The answer, as JSON.")],
    mcp_config: McpConfigOpt,
    as_json: JsonOpt = False,
) -> None:
    """Answer a pending input request (recorded first, then sent with tasks/update)."""

    def body() -> None:
        try:
            response = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise CliError(f"the answer is not valid JSON: {exc.msg}") from exc
        settings = _settings(ctx)
        principal = settings.require_principal()
        servers = load_mcp_config(mcp_config)
        with open_ledger(settings) as ledger:
            ledger.for_principal(principal).get_task(task)
            delivered = anyio.run(_answer, ledger, principal, servers, task, key, response)
        if as_json:
            _print_json(
                {"task_ref": task, "input_ref": key, "recorded": True, "delivered": delivered}
            )
            return
        verdict = (
            "delivered"
            if delivered
            else ("recorded, NOT yet delivered (redelivered when a bridge recovers)")
        )
        _out().print(f"answer to {key} on {task}: {verdict}", highlight=False, markup=False)

    _run_command(body)


async def _answer(
    ledger: Ledger,
    principal: str,
    servers: list[McpServerConfig],
    task_ref: str,
    input_ref: str,
    response: Any,
) -> bool:
    async with _bridge_for(ledger, principal, servers) as bridge:
        receipt = await bridge.answer_input(principal, task_ref, input_ref, response)
        delivered: bool = receipt.delivered
        return delivered


# -- db -------------------------------------------------------------------------------------------
@db_app.command("upgrade")
def db_upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Option("--revision", help="Target revision.")] = "head",
) -> None:
    """Run the Alembic migrations on the ledger and print the revision."""

    def body() -> None:
        url = _settings(ctx).require_db()
        engine = create_ledger_engine(url)
        try:
            before = migrate.current_revision(engine)
            migrate.upgrade(engine, revision)
            after = migrate.current_revision(engine)
        finally:
            engine.dispose()
        change = "already at" if before == after else f"upgraded {before or '<empty>'} ->"
        _out().print(f"ledger {safe_url(url)}: {change} {after}", highlight=False, markup=False)

    _run_command(body)


def main() -> None:
    """Console-script entry point (``bridge = "bridge.cli.app:main"``)."""
    app(prog_name="bridge")
