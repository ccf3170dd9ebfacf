"""The operator's loop in the CLI: ``attention`` (what waits for a person), then act on it:
``resolve`` (a call of unknown outcome), ``ack`` (a lost task, an anomaly), ``close-run`` (an
orphaned run). Each goes through the public API (``Bridge.attention``, ``Run``) on the ledger
alone: nothing here talks to an MCP server, and nothing settles another process's calls.
These are plain functions; :mod:`bridge.cli._app` registers them as commands.
"""

from __future__ import annotations

import getpass
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import typer
from rich.padding import Padding
from rich.text import Text

from bridge._lifecycle import Admission, OuterStatus
from bridge.cli._context import (
    CliError,
    FollowForOpt,
    JsonOpt,
    open_ledger,
    out_console,
    print_json,
    run_command,
    settings_of,
)
from bridge.cli._records import field_hints, short_time

if TYPE_CHECKING:
    from bridge._facade import Bridge
    from bridge._ledger.reads.views import AttentionItem

FOLLOW_POLL_S = 0.5
T = TypeVar("T")

ByOpt = Annotated[
    str | None,
    typer.Option("--by", help="Who acts (recorded on the event); default cli:<login name>."),
]


def _by(given: str | None) -> str:
    if given:
        return given
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name in a bare container
        return "cli"


def _with_bridge(ctx: typer.Context, use: Callable[[Bridge, str], Awaitable[T]]) -> T:
    """Run ``use`` on a bridge over the CLI's ledger, scoped to its principal. The bridge is
    not entered: no server is contacted and nothing is recovered."""
    from bridge._facade import Bridge
    from bridge._settings import BridgeSettings

    settings = settings_of(ctx)
    principal = settings.require_principal()
    with open_ledger(settings) as ledger:
        config = BridgeSettings(principals=[principal], recover_on_start=False)
        bridge = Bridge(ledger, config)
        return anyio.run(use, bridge, principal)


def _served(ctx: typer.Context, extra: Sequence[str], every: bool) -> list[str]:
    """The principals one ``attention`` read serves: ``--principal`` (global, then each one
    given to the command), or with ``--all-principals`` every principal with a run in the
    ledger (for an operator who owns it). Scoped as ``Bridge.attention`` is: one bridge
    serving exactly these, each read through its own principal's scope."""
    settings = settings_of(ctx)
    if every:
        from bridge._ledger.reads.principals import principals_in

        with open_ledger(settings) as ledger:
            return principals_in(ledger)
    named = [p for p in (settings.principal, *extra) if p]
    if not named:
        settings.require_principal()  # the one clear error
    return list(dict.fromkeys(named))


def _attention_of(
    ctx: typer.Context,
    principals: Sequence[str],
    read: Callable[[Bridge, str | None], Awaitable[list[AttentionItem]]],
) -> list[AttentionItem]:
    """Run ``read`` on a bridge serving ``principals`` (not entered: no server contacted)."""
    from bridge._facade import Bridge
    from bridge._settings import BridgeSettings

    if not principals:
        return []  # --all-principals on a ledger without runs
    with open_ledger(settings_of(ctx)) as ledger:
        config = BridgeSettings(principals=list(principals), recover_on_start=False)
        one = principals[0] if len(principals) == 1 else None
        return anyio.run(read, Bridge(ledger, config), one)


# -- attention ------------------------------------------------------------------------------------
def attention(
    ctx: typer.Context,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep watching: print items as they come.")
    ] = False,
    follow_for: FollowForOpt = None,
    older_than: Annotated[
        float | None,
        typer.Option("--older-than", min=0, help="Only items waiting at least SECONDS."),
    ] = None,
    overdue_after: Annotated[
        float, typer.Option("--overdue-after", min=0, help="An input is overdue after SECONDS.")
    ] = 3600.0,
    orphan_after: Annotated[
        float,
        typer.Option(
            "--orphan-after", min=0, help="A silent served run is orphaned after SECONDS."
        ),
    ] = 3600.0,
    principal: Annotated[
        list[str] | None,
        typer.Option(
            "--principal",
            "-p",
            help="Also list this principal's items (repeatable; with the global --principal).",
        ),
    ] = None,
    all_principals: Annotated[
        bool,
        typer.Option(
            "--all-principals",
            help="Every principal with a run in the ledger (an operator who owns the ledger).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """What waits for a person, oldest first, each with its next step: inputs waiting (or
    overdue), calls of unknown outcome, lost tasks, anomalies, orphaned runs. Of one
    principal, of several (``-p`` repeated) or of all of them (``--all-principals``)."""

    async def read(bridge: Bridge, principal: str | None) -> list[AttentionItem]:
        return await bridge.attention(
            principal,
            older_than=older_than,
            overdue_after=overdue_after,
            orphan_after=orphan_after,
        )

    def body() -> None:
        if all_principals and principal:
            raise CliError("give either --principal or --all-principals, not both")
        served = _served(ctx, principal or [], all_principals)
        several = len(served) != 1
        if not follow:
            items = _attention_of(ctx, served, read)
            if as_json:
                head: dict[str, Any] = {"principals": served}
                if not several:
                    head["principal"] = served[0]
                print_json({**head, "items": [i.to_json() for i in items]})
            elif items:
                _print_items(items, with_principal=several)
            else:
                out_console().print("nothing waits for a person", style="dim")
            return
        _follow(ctx, served, read, as_json, follow_for)

    run_command(body)


def _follow(
    ctx: typer.Context,
    served: Sequence[str],
    read: Callable[[Bridge, str | None], Awaitable[list[AttentionItem]]],
    as_json: bool,
    follow_for: float | None,
) -> None:
    """Print each item once when it appears, and one line when it leaves the list."""
    deadline = None if follow_for is None else time.monotonic() + follow_for
    shown: dict[tuple[str, str], AttentionItem] = {}
    several = len(served) != 1
    try:
        while True:
            items = _attention_of(ctx, served, read)
            now: dict[tuple[str, str], AttentionItem] = {(i.kind, i.ref): i for i in items}
            fresh = [i for key, i in now.items() if key not in shown]
            gone = [i for key, i in shown.items() if key not in now]
            for item in gone:
                if as_json:
                    _json_line({"left": True, "kind": item.kind, "ref": item.ref})
                else:
                    out_console().print(f"done: {item.kind} {item.ref}", style="dim")
            if as_json:
                for item in fresh:
                    _json_line(item.to_json())
            elif fresh:
                _print_items(fresh, with_principal=several)
            shown = now
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return


def _json_line(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


_KIND_STYLES = {
    "input_waiting": "dark_orange",
    "input_overdue": "bold dark_orange",
    "unknown_outcome": "bold yellow",
    "lost_task": "bold white on grey23",
    "anomaly": "bold red",
    "orphaned_run": "bold magenta",
}


def _print_items(items: Sequence[AttentionItem], *, with_principal: bool = False) -> None:
    """One block per item, wrapped (never cut) at any width, piped or not; across several
    principals, each item names its own."""
    out = out_console()
    for item in items:
        head = Text()
        head.append(short_time(item.since_ms), style="dim")
        head.append("  ")
        if with_principal:
            head.append(f"[{item.principal}]", style="bold blue")
            head.append("  ")
        head.append(item.kind, style=_KIND_STYLES.get(item.kind, ""))
        head.append("  ")
        head.append(item.ref, style="bold")
        out.print(head, overflow="fold")
        where = f"run {item.run_ref}"
        if item.response_id:
            where += f"  response {item.response_id}"
        lines = [Text(where), Text(item.summary)]
        if item.fields:
            hints = field_hints(item.requested_schema) or list(item.fields)
            lines.append(Text("fields: " + ", ".join(hints)))
        lines.append(Text("next: " + item.next_step, style="cyan"))
        for line in lines:  # indented as a block: a wrapped line stays under its item
            out.print(Padding(line, (0, 0, 0, 2), expand=False), overflow="fold")


# -- acting ---------------------------------------------------------------------------------------
def resolve(
    ctx: typer.Context,
    op: Annotated[str, typer.Argument(metavar="OP_REF", help="The call (op_…).")],
    ran: Annotated[bool, typer.Option("--ran", help="The server ran it: never resend.")] = False,
    never_ran: Annotated[
        bool,
        typer.Option("--never-ran", help="It never ran: the same call may be sent again."),
    ] = False,
    by: ByOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Give the final verdict on a call whose outcome is unknown (once; who gave it is kept)."""

    def body() -> None:
        if ran == never_ran:
            raise CliError("give exactly one of --ran, --never-ran")
        admission = Admission.ADMITTED if ran else Admission.NOT_ADMITTED
        who = _by(by)

        async def act(bridge: Bridge, principal: str) -> None:
            run = await bridge.run_of(principal, op)
            await run.resolve_unknown_outcome(op, admission, by=who)

        _with_bridge(ctx, act)
        verdict = "ran" if ran else "never ran"
        if as_json:
            print_json({"op_ref": op, "admission": admission.value, "by": who})
        else:
            out_console().print(f"{op}: {verdict} (by {who})", markup=False, highlight=False)

    run_command(body)


def ack(
    ctx: typer.Context,
    ref: Annotated[
        str,
        typer.Argument(metavar="REF", help="A lost task (tk_…) or an anomaly (run_…:SEQ)."),
    ],
    note: Annotated[str, typer.Option("--note", help="What you found out.")] = "",
    by: ByOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Acknowledge a lost task or an anomaly: it leaves the attention list (recorded)."""

    def body() -> None:
        who = _by(by)

        async def act(bridge: Bridge, principal: str) -> None:
            run_ref, sep, _ = ref.rpartition(":")
            run = bridge.run(principal, run_ref) if sep else await bridge.run_of(principal, ref)
            await run.acknowledge(ref, by=who, note=note)

        _with_bridge(ctx, act)
        if as_json:
            print_json({"ref": ref, "acknowledged": True, "by": who})
        else:
            out_console().print(f"{ref}: acknowledged (by {who})", markup=False, highlight=False)

    run_command(body)


_END_STATES = [s.value for s in OuterStatus if s.is_terminal]


def close_run(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN_REF", help="The served run (run_…).")],
    status: Annotated[
        str, typer.Option("--status", help=f"Its end state: {', '.join(_END_STATES)}.")
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded on the event).")],
    by: ByOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """End a served run nobody reports on any more (an orphaned run). Its inner tasks are left
    as they are: open ones stay open and watched."""

    def body() -> None:
        if status not in _END_STATES:
            raise CliError(f"--status must be one of {', '.join(_END_STATES)}")
        who = _by(by)

        async def act(bridge: Bridge, principal: str) -> None:
            await bridge.run(principal, run_ref).close(OuterStatus(status), reason=reason, by=who)

        _with_bridge(ctx, act)
        if as_json:
            print_json({"run_ref": run_ref, "status": status, "reason": reason, "by": who})
        else:
            out_console().print(
                f"{run_ref}: closed as {status} (by {who}); its tasks are left as they are",
                markup=False,
                highlight=False,
            )

    run_command(body)
