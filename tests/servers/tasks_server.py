"""A real SEP-2663 Tasks server (FastMCP + fastmcp-tasks) for end-to-end tests.

Run as ``python -m tests.servers.tasks_server --port P|0 --port-file F [--host 127.0.0.1] [--stdio]
[--effects-file PATH] [--methods-file PATH]``. It uses fastmcp-tasks' own implementation of
``io.modelcontextprotocol/tasks`` (in-process ``memory://`` Docket backend), so the bridge is
tested against a server nobody in this repo wrote. Side effects are appended, one line each, to
the effects file (``--effects-file`` or ``$TASKS_SERVER_EFFECTS``) so a test can count how often
a non-idempotent action really happened, e.g. across retries and restarts. With
``--methods-file`` the JSON-RPC method of every request it receives is appended there, one a
line, so a test can count what a client sent (e.g. no ``tasks/update`` at all).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp.shared.exceptions import MCPError
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.servers.effects import append_effect
from tests.support.asgi_replay import read_body
from tests.support.server_main import serve_main

EFFECTS_ENV = "TASKS_SERVER_EFFECTS"
# Short polls keep the tests fast; every task tool in this server uses the same config.
TASK = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=50))
# A server asking for a slow poll (tests check the bridge never polls sooner than this).
SLOW_POLL = TaskConfig(mode="required", poll_interval=timedelta(seconds=60))
# Docket's default worker concurrency (10) would make tests that park many
# ``wait_forever`` tasks stall the others; the memory:// backend is local, so go wide.
WORKER_CONCURRENCY = 64
GRACEFUL_SHUTDOWN_SECONDS = 1

_effects_file: Path | None = None

mcp = FastMCP("uhp-bridge-tasks-test-server")
mcp.add_extension(TasksExtension(concurrency=WORKER_CONCURRENCY))


def set_effects_file(path: str | os.PathLike[str] | None) -> None:
    """Choose where side effects are recorded (``None``: env var, else nowhere)."""
    global _effects_file
    chosen = path if path is not None else os.environ.get(EFFECTS_ENV)
    _effects_file = Path(chosen) if chosen else None


def record(line: str) -> None:
    """Append one side-effect line to the effects file, if one was chosen."""
    append_effect(_effects_file, line)


@mcp.tool(task=TASK, annotations={"readOnlyHint": True, "idempotentHint": True})
async def slow_report(quarter: str, seconds: float = 0.3) -> str:
    """Read-only, idempotent work that takes a while: the happy path."""
    await asyncio.sleep(seconds)
    return f"report {quarter}"


@mcp.tool(task=TASK, annotations={"destructiveHint": True, "idempotentHint": False})
async def approve_payment(
    amount: int, payment_key: str, ctx: Context
) -> str | mcp_types.InputRequiredResult:
    """Non-idempotent action gated on an in-task elicitation (input_required round)."""
    answers = ctx.input_responses
    if not answers:
        schema = {
            "type": "object",
            "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"],
        }
        ask = mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                message=f"Approve payment {payment_key} of {amount}?",
                requested_schema=schema,
            )
        )
        return mcp_types.InputRequiredResult(input_requests={"approve": ask})
    answer = answers.get("approve")
    if (
        isinstance(answer, mcp_types.ElicitResult)
        and answer.action == "accept"
        and (answer.content or {}).get("approve") is True
    ):
        record(f"payment {payment_key} {amount}")
        return f"approved {payment_key}"
    return f"declined {payment_key}"


@mcp.tool(task=SLOW_POLL, annotations={"readOnlyHint": True})
async def slow_poll_report(quarter: str) -> str:
    """Quick work, but the server asks to be polled once a minute (``pollIntervalMs`` 60000)."""
    return f"report {quarter}"


@mcp.tool(task=TASK)
async def wait_forever(seconds: float = 120) -> str:
    """Stays ``working`` until cancelled via tasks/cancel (or the sleep ends)."""
    await asyncio.sleep(seconds)
    return "woke up"


@mcp.tool(task=TASK)
async def fail_rpc() -> str:
    """A protocol fault: the task ends ``failed`` carrying this JSON-RPC error."""
    raise MCPError(code=mcp_types.INTERNAL_ERROR, message="backend exploded")


@mcp.tool(task=TASK)
async def tool_error() -> str:
    """A tool error: the task ends ``completed`` with ``isError: true``."""
    raise ValueError("bad input")


@mcp.tool
async def echo(text: str) -> str:
    """Never a task: answered inline even for a tasks-declaring client."""
    return text


@mcp.tool(task=TASK)
async def record_effect(key: str, seconds: float = 0.0) -> str:
    """Task with one countable side effect (after an optional delay)."""
    await asyncio.sleep(seconds)
    record(f"effect {key}")
    return f"done {key}"


@mcp.tool
async def progress_echo(text: str, steps: int, ctx: Context) -> str:
    """Inline, reporting ``steps`` progress notifications on the way (``step i/steps``)."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}/{steps}")
    return text


@mcp.tool
async def record_effect_inline(key: str) -> str:
    """Inline (non-task) counterpart of ``record_effect``."""
    record(f"effect {key}")
    return f"done {key}"


class MethodLog:
    """ASGI middleware: appends the JSON-RPC method of each POSTed message to a file, then
    hands the request on unchanged."""

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = Path(path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, replay = await read_body(receive)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        for item in parsed if isinstance(parsed, list) else [parsed]:
            if isinstance(item, dict) and isinstance(item.get("method"), str):
                with self.path.open("a", encoding="utf-8") as log:
                    log.write(item["method"] + "\n")
        await self.app(scope, replay, send)


def main(argv: Sequence[str] | None = None) -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--stdio", action="store_true", help="serve over stdio, not HTTP")
        parser.add_argument("--effects-file", default=None)
        parser.add_argument("--methods-file", default=None, help="log each request's method here")

    def setup(args: argparse.Namespace) -> list[Middleware]:
        set_effects_file(args.effects_file)
        return [Middleware(MethodLog, path=args.methods_file)] if args.methods_file else []

    serve_main(
        mcp,
        argv,
        description=__doc__.splitlines()[0],
        options=options,
        setup=setup,
        graceful_shutdown_s=GRACEFUL_SHUTDOWN_SECONDS,
    )


if __name__ == "__main__":
    main()
