"""Example MCP report server: one long-running, read-only task tool (MCP Tasks extension).

    python -m harness_examples.mcp_servers.report_server --port 8701 [--host 127.0.0.1]
        [--token T]                                    # Streamable HTTP on http://HOST:PORT/mcp
    python -m harness_examples.mcp_servers.report_server --stdio

``generate_report`` is a *required* task tool: a client that declares
``io.modelcontextprotocol/tasks`` gets a task handle (``resultType: "task"``) and polls
``tasks/get``; one that does not gets JSON-RPC error -32021. While the task works, its
``statusMessage`` says which section is being written (fastmcp-tasks maps
``ctx.report_progress(message=...)`` to the task status). The result text depends only on the
arguments, so a retried call returns the same report (the tool is read-only and idempotent).

With ``--token`` (or ``$REPORT_SERVER_TOKEN``) every HTTP request needs
``Authorization: Bearer <token>`` (see ``auth.py``). Tasks live in fastmcp-tasks' in-process
``memory://`` backend: a restart forgets them.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated

from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from pydantic import Field

from harness_examples.mcp_servers.auth import add_token_argument, check_transport, serve
from harness_examples.port_report import add_port_arguments

TOKEN_ENV = "REPORT_SERVER_TOKEN"
POLL_INTERVAL = timedelta(milliseconds=200)
SECTION_TITLES = ("Revenue", "Costs", "Headcount", "Pipeline", "Risks", "Outlook")
MAX_SECTIONS = 12
MAX_SECONDS_PER_SECTION = 60.0

mcp = FastMCP("example-report-server")
mcp.add_extension(TasksExtension())  # memory:// Docket backend, in this process


def section_title(index: int) -> str:
    """Title of the 1-based section ``index`` (titles repeat after six sections)."""
    return SECTION_TITLES[(index - 1) % len(SECTION_TITLES)]


def render_report(quarter: str, sections: int) -> str:
    """The report text: a pure function of the arguments."""
    lines = [f"Quarterly report {quarter}", f"Sections: {sections}"]
    for index in range(1, sections + 1):
        title = section_title(index)
        lines.append(f"{index}. {title}: {title.lower()} figures for {quarter} are on plan.")
    lines.append(f"End of report {quarter}.")
    return "\n".join(lines)


@mcp.tool(
    task=TaskConfig(mode="required", poll_interval=POLL_INTERVAL),
    annotations={"readOnlyHint": True, "idempotentHint": True},
)
async def generate_report(
    quarter: Annotated[str, Field(min_length=1, max_length=32, description="e.g. 2026-Q3")],
    ctx: Context,
    sections: Annotated[int, Field(ge=1, le=MAX_SECTIONS)] = 3,
    seconds_per_section: Annotated[float, Field(ge=0, le=MAX_SECONDS_PER_SECTION)] = 0.5,
) -> str:
    """Write a quarterly report, one section at a time (a long-running task)."""
    for index in range(1, sections + 1):
        await ctx.report_progress(
            index - 1, sections, f"writing section {index}/{sections}: {section_title(index)}"
        )
        await asyncio.sleep(seconds_per_section)
    await ctx.report_progress(sections, sections, "assembling report")
    return render_report(quarter, sections)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_port_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--stdio", action="store_true", help="serve over stdio instead of HTTP")
    add_token_argument(parser, TOKEN_ENV)
    args = parser.parse_args(argv)
    check_transport(parser, args)
    serve(mcp, args, TOKEN_ENV)


if __name__ == "__main__":
    main()
