"""A real Tasks server (FastMCP + fastmcp-tasks) that asks *before* it creates a task.

Run as ``python -m tests.servers.mrtr_tasks_server --port P|0 --port-file F
[--effects-file PATH]``. A FastMCP
middleware guards ``approved_export``: the first ``tools/call`` gets an ``InputRequiredResult``
(MRTR) and no task exists; the retry carrying an accepted approval passes on to fastmcp-tasks,
which creates the task — the pattern the Tasks extension recommends ("resolve all MRTR
exchanges synchronously before responding with a CreateTaskResult"). Each run of the task
appends ``export <rows>`` to the effects file, so a test can count executions.

``approved_transfer`` asks two inputs in one round (``approve`` and ``confirm``) and creates
its task only once both are accepted; each round it asks appends ``asked transfer <amount>``
and each run ``transfer <amount>``, so a test can tell that a partial answer sent nothing.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import mcp_types
from fastmcp import FastMCP
from fastmcp.server.dependencies import get_context
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

from tests.servers.effects import append_effect
from tests.support.server_main import serve_main

GUARDED = "approved_export"
TWO_INPUTS = "approved_transfer"
_effects: list[Path] = []  # the effects file, when one was given

mcp = FastMCP("uhp-bridge-mrtr-tasks-test-server")
mcp.add_extension(TasksExtension())


class AskBeforeTheTask(Middleware):
    """The approval is asked on the wire, before the tasks extension sees the call."""

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, ToolResult]
    ) -> ToolResult:
        if context.message.name == TWO_INPUTS:
            return await self._two_inputs(context, call_next)
        if context.message.name != GUARDED:
            return await call_next(context)
        answer = (get_context().input_responses or {}).get("approve")
        if isinstance(answer, mcp_types.ElicitResult) and answer.action == "accept":
            return await call_next(context)  # approved: now the task is created
        if answer is not None:
            return ToolResult(content=f"export refused ({answer.action})")
        ask = mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                message="Export the ledger?",
                requested_schema={"type": "object", "properties": {}},
            )
        )
        return InputRequiredToolResult(
            mcp_types.InputRequiredResult(input_requests={"approve": ask}, request_state="ask")
        )

    async def _two_inputs(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, ToolResult]
    ) -> ToolResult:
        """Both inputs asked at once; the task only once both are accepted."""
        answers = get_context().input_responses or {}
        given = {key: answers.get(key) for key in ("approve", "confirm")}
        if all(
            isinstance(a, mcp_types.ElicitResult) and a.action == "accept" for a in given.values()
        ):
            return await call_next(context)
        if any(isinstance(a, mcp_types.ElicitResult) for a in given.values()):
            return ToolResult(content="transfer refused")  # one declined, or not both answered
        amount = (context.message.arguments or {}).get("amount")
        append_effect(_effects[0] if _effects else None, f"asked transfer {amount}")
        asks = {
            key: mcp_types.ElicitRequest(
                params=mcp_types.ElicitRequestFormParams(
                    message=f"{key.capitalize()} the transfer of {amount}?",
                    requested_schema={"type": "object", "properties": {}},
                )
            )
            for key in given
        }
        return InputRequiredToolResult(
            mcp_types.InputRequiredResult(input_requests=asks, request_state="ask-both")
        )


mcp.add_middleware(AskBeforeTheTask())


@mcp.tool(task=TaskConfig(mode="required", poll_interval=timedelta(milliseconds=50)))
async def approved_export(rows: int) -> str:
    """Runs as a task once approved."""
    await asyncio.sleep(0.2)
    append_effect(_effects[0] if _effects else None, f"export {rows}")
    return f"exported {rows} rows"


@mcp.tool(task=TaskConfig(mode="required", poll_interval=timedelta(milliseconds=50)))
async def approved_transfer(amount: int) -> str:
    """Runs as a task once both inputs of its round are accepted."""
    await asyncio.sleep(0.2)
    append_effect(_effects[0] if _effects else None, f"transfer {amount}")
    return f"transferred {amount}"


def main(argv: Sequence[str] | None = None) -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--effects-file", default=None)

    def setup(args: argparse.Namespace) -> list[Any]:
        if args.effects_file:
            _effects.append(Path(args.effects_file))
        return []

    serve_main(mcp, argv, description=__doc__.splitlines()[0], options=options, setup=setup)


if __name__ == "__main__":
    main()
