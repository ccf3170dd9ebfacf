"""The operator CLI's MCP-side commands: recover, cancel-task, answer (through a Bridge).

Tokens never appear in the MCP config file, only credential refs, resolved from the environment.
These are plain functions; :mod:`bridge.cli._app` registers them as commands.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from bridge._answers import parse_pairs
from bridge._ledger._base import wall_clock_ms
from bridge._ledger.store import Ledger
from bridge._mcp.config_file import resolve_credential
from bridge._outcomes import AnswerDelivery, AnswerReceipt, InputRequest, elicit
from bridge.cli._context import (
    CliError,
    JsonOpt,
    err_console,
    open_ledger,
    out_console,
    print_json,
    run_command,
    settings_of,
)
from bridge.cli._records import input_record, task_record

if TYPE_CHECKING:
    from bridge._config import McpServerConfig


def load_mcp_config(path: Path) -> list[McpServerConfig]:
    """:func:`bridge._mcp.config_file.load_mcp_config`, its refusals as CLI errors."""
    from bridge._mcp.config_file import McpConfigError, load_mcp_config as load

    try:
        return load(path)
    except McpConfigError as exc:
        raise CliError(str(exc)) from exc


McpConfigOpt = Annotated[
    Path,
    typer.Option(
        "--mcp-config",
        envvar="BRIDGE_MCP_CONFIG",
        show_envvar=True,
        help='JSON {"mcpServers": [{"name", "url", "enabled", "auth": {"credential_ref"}}]}; '
        "tokens come from env BRIDGE_CREDENTIAL_<REF>.",
        exists=False,
    ),
]


@contextmanager
def mcp_scope(
    ctx: typer.Context, mcp_config: Path
) -> Iterator[tuple[Ledger, str, list[McpServerConfig]]]:
    """The ledger, the principal and the MCP servers an MCP-side command works with."""
    settings = settings_of(ctx)
    principal = settings.require_principal()
    servers = load_mcp_config(mcp_config)
    with open_ledger(settings) as ledger:
        yield ledger, principal, servers


def _bridge_for(ledger: Ledger, principal: str, servers: list[McpServerConfig]) -> Any:
    from bridge._facade import Bridge  # the MCP/UHP stack is only needed by these commands
    from bridge._settings import BridgeSettings

    # No automatic recovery: a cancel or an answer must not settle another process's in-flight
    # calls. `bridge recover` runs recovery explicitly.
    return Bridge(
        ledger,
        BridgeSettings(
            principals=[principal],
            mcp_servers=servers,
            credentials=resolve_credential,
            recover_on_start=False,
        ),
    )


SETTLED_POLL_S = 0.1


def recover(
    ctx: typer.Context,
    mcp_config: McpConfigOpt,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0,
            help="Keep watching open tasks until every one has settled, at most SECONDS.",
        ),
    ] = 0.0,
    settle: Annotated[
        bool,
        typer.Option(
            "--settle-in-flight/--no-settle-in-flight",
            help="Also mark calls left pending/sent as unknown outcome. Off by default: only "
            "safe once every other process dispatching for this principal is stopped.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Open a Bridge on the ledger, recover open work and print the recovery report. Calls
    another process may still have in flight are left alone unless --settle-in-flight."""

    def body() -> None:
        started = time.monotonic()
        with mcp_scope(ctx, mcp_config) as (ledger, principal, servers):
            report, tasks, refused = anyio.run(_recover, ledger, principal, servers, wait, settle)
        took = time.monotonic() - started
        data = {
            "tasks_watched": report.tasks_watched,
            "calls_marked_unknown": report.calls_marked_unknown,
            "answers_to_redeliver": report.answers_to_redeliver,
            "cancels_to_resend": report.cancels_to_resend,
            "remote_runs_resumed": report.remote_runs_resumed,
            "served_runs_open": list(report.served_runs_open),
            "pending_inputs": [input_record(r) for r in report.pending_inputs],
            "waited_s": wait,  # at most: it returns once every task has settled
            "took_s": round(took, 1),
            "settled": all(not task["open"] for task in tasks),
            "tasks": tasks,
            "servers_refusing_credentials": refused,
        }
        if as_json:
            print_json(data)
            _fail_if_refused(refused)
            return
        out = out_console()
        out.print("[bold]Recovery report[/bold]")
        for key in (
            "tasks_watched",
            "calls_marked_unknown",
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
            watched = f" (watched at most {wait:g}s)" if wait else ""
            out.print(f"[bold]Tasks after {took:.1f}s{watched}[/bold]")
            for task in tasks:
                verdicts = " ".join(task["verdicts"])
                out.print(
                    f"  {task['task_ref']} {task['server']}.{task['tool']} {task['status']} "
                    f"{verdicts}",
                    highlight=False,
                    markup=False,
                )
        _fail_if_refused(refused)

    run_command(body)


def _fail_if_refused(refused: list[dict[str, Any]]) -> None:
    """Open tasks whose server rejects the bridge's credential cannot be watched: no status
    the report shows for them is current, so recovery did not succeed."""
    if refused:
        named = ", ".join(
            f"{r['server']} ({r['status']}, {len(r['tasks'])} open task(s))" for r in refused
        )
        raise CliError(
            f"credentials rejected by {named}: their open tasks cannot be watched; fix the "
            "credential (BRIDGE_CREDENTIAL_<REF>) and run `bridge recover` again"
        )


async def _recover(
    ledger: Ledger, principal: str, servers: list[McpServerConfig], wait: float, settle: bool
) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    tenant = ledger.for_principal(principal)
    async with _bridge_for(ledger, principal, servers) as bridge:
        # The tasks open when recovery starts: one that settles at its first poll is still
        # reported (read after recovery, it would be missing from the report).
        watched = [t.ref for t in tenant.reads.list_tasks(open_only=True)]
        report = await bridge.recover(settle_in_flight_calls=settle)
        if wait > 0 and watched:
            with err_console().status(f"watching {len(watched)} open task(s), at most {wait:g}s"):
                with anyio.move_on_after(wait):
                    while tenant.reads.list_tasks(open_only=True):  # returns once all have settled
                        await anyio.sleep(SETTLED_POLL_S)
        refused = await _servers_refusing_credentials(bridge, principal, servers, tenant, watched)
    now = wall_clock_ms()
    tasks = [task_record(tenant.reads.get_task(ref), [], now) for ref in watched]
    return report, tasks, refused


async def _servers_refusing_credentials(
    bridge: Any, principal: str, servers: list[McpServerConfig], tenant: Any, watched: list[str]
) -> list[dict[str, Any]]:
    """Each configured server holding an open task that answers the bridge's credential with
    401/403. A poll that was refused backs off quietly (the server may be restarting), so it
    is asked here once, through the bridge's own connection, before the report is trusted."""
    from bridge._errors import ServerConnectFailed, ServerCredentialsRejected

    open_tasks = [tenant.reads.get_task(ref) for ref in watched]
    refused: list[dict[str, Any]] = []
    for config in servers:
        tasks = [t.ref for t in open_tasks if t.server_endpoint == config.endpoint]
        if not tasks:
            continue
        try:
            await bridge.list_tools(principal, config.name)
        except ServerCredentialsRejected as exc:
            refused.append({"server": config.name, "status": exc.status, "tasks": tasks})
        except ServerConnectFailed:
            continue  # unreachable: the report's unreachable events say so; not a credential
    return refused


def cancel_task(
    ctx: typer.Context,
    task: Annotated[str, typer.Argument(help="Task reference (tk_…).")],
    mcp_config: McpConfigOpt,
    as_json: JsonOpt = False,
) -> None:
    """Ask the task's server to cancel it (recorded first as intent)."""

    def body() -> None:
        with mcp_scope(ctx, mcp_config) as (ledger, principal, servers):
            view = ledger.for_principal(principal).reads.get_task(task)
            if view.terminal_at_ms is not None:
                raise CliError(f"task {task} is already {view.status.value}; nothing to cancel")
            acknowledged = anyio.run(_cancel, ledger, principal, servers, task)
        if as_json:
            print_json({"task_ref": task, "cancel_recorded": True, "acknowledged": acknowledged})
            return
        verdict = (
            "acknowledged"
            if acknowledged
            else "NOT acknowledged (the recorded intent is resent when a bridge recovers)"
        )
        out_console().print(
            f"cancel requested for {task} (recorded as intent); server {verdict}. "
            "The task's status changes only when a poll observes it.",
            highlight=False,
            markup=False,
        )

    run_command(body)


async def _cancel(
    ledger: Ledger, principal: str, servers: list[McpServerConfig], task_ref: str
) -> bool:
    async with _bridge_for(ledger, principal, servers) as bridge:
        result: bool = await (await bridge.run_of(principal, task_ref)).cancel_task(task_ref)
        return result


def answer(
    ctx: typer.Context,
    task: Annotated[
        str,
        typer.Argument(
            metavar="TASK_OR_OP_REF",
            help="Task reference (tk_…), or a call's op_ref (op_…) for an MRTR input.",
        ),
    ],
    key: Annotated[
        str,
        typer.Argument(help="Input reference (in_…) from task/call.input_required."),
    ],
    mcp_config: McpConfigOpt,
    accept: Annotated[
        list[str] | None,
        typer.Option("--accept", metavar="KEY=VALUE", help="Accept, one field each time."),
    ] = None,
    decline: Annotated[bool, typer.Option("--decline", help="Say no.")] = False,
    dismiss: Annotated[bool, typer.Option("--dismiss", help="Dismiss without choosing.")] = False,
    content_json: Annotated[
        str | None,
        typer.Option("--content", metavar="JSON", help="Accept with this JSON content (checked)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a pending elicitation: the answer is built from the request's schema
    (``--accept KEY=VALUE ...``, ``--decline``, ``--dismiss``, or ``--content '{...}'`` JSON)
    and checked before anything is recorded; then sent with tasks/update (a task's), or, once
    its leg is fully answered, by calling the tool again (a call's MRTR input)."""

    def body() -> None:
        chosen = [bool(accept), decline, dismiss, content_json is not None]
        if sum(chosen) != 1:
            raise CliError(
                "give exactly one of --accept KEY=VALUE, --decline, --dismiss, --content JSON"
            )
        content: Any = None
        if content_json is not None:
            try:
                content = json.loads(content_json)
            except json.JSONDecodeError as exc:
                raise CliError(f"--content is not valid JSON: {exc.msg}") from exc
        from bridge._ids import is_call_ref

        texts = parse_pairs(key, accept or [])

        action = "decline" if decline else "cancel" if dismiss else "accept"  # the wire's word

        def send(request: InputRequest) -> Awaitable[AnswerReceipt]:
            return elicit(request, action, texts=texts or None, content=content)

        with mcp_scope(ctx, mcp_config) as (ledger, principal, servers):
            # NotFound (exit 1) for a foreign or unknown reference
            delivery = anyio.run(_answer, ledger, principal, servers, task, key, send)
        delivered = delivery in (AnswerDelivery.DELIVERED, AnswerDelivery.RETRIED)
        if as_json:
            owner = "op_ref" if is_call_ref(task) else "task_ref"
            print_json(
                {
                    owner: task,
                    "input_ref": key,
                    "recorded": True,
                    "delivered": delivered,
                    "delivery": delivery.value,
                }
            )
            return
        verdict = _VERDICTS.get(
            delivery, "recorded, NOT yet delivered (redelivered when a bridge recovers)"
        )
        out_console().print(f"answer to {key} on {task}: {verdict}", highlight=False, markup=False)

    run_command(body)


async def _answer(
    ledger: Ledger,
    principal: str,
    servers: list[McpServerConfig],
    owner_ref: str,
    input_ref: str,
    send: Callable[[InputRequest], Awaitable[AnswerReceipt]],
) -> AnswerDelivery:
    async with _bridge_for(ledger, principal, servers) as bridge:
        run = await bridge.run_of(principal, owner_ref)
        # TaskWasLost when the task was lost: nothing is sent
        receipt = await send(await run.pending_input(owner_ref, input_ref))
        return receipt.delivery


_VERDICTS = {
    AnswerDelivery.DELIVERED: "delivered",
    AnswerDelivery.RETRIED: "delivered (the call was sent again with the answers)",
    AnswerDelivery.AWAITING_INPUTS: "recorded; the call waits for its other inputs",
    AnswerDelivery.TASK_LOST: "recorded, NOT delivered: the server no longer knows the task",
}
