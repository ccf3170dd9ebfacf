"""A task-tool server for the waiting benchmarks (FastMCP + fastmcp-tasks, like the examples).

``work(key, seconds)`` is a required task tool that sleeps ``seconds`` and returns; every start
and every finish is appended to ``--effects-file`` (``start <key>`` / ``done <key>``), so the
bench counts executions on the server side. ``--poll-interval-ms`` is the ``pollIntervalMs``
its tasks advertise. Run: ``python -m bench.task_tool_server --port P --effects-file F``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Sequence
from datetime import timedelta

from fastmcp import FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

from harness_examples.port_report import add_port_arguments, check_port_arguments, run_fastmcp

_effects: list[str] = []  # the effects file, set by main()


def _record(line: str) -> None:
    fd = os.open(_effects[0], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def work(key: str, seconds: float = 3.0) -> str:
    """Takes ``seconds``; counted on start and on finish."""
    _record(f"start {key}")
    await asyncio.sleep(seconds)
    _record(f"done {key}")
    return f"done {key}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_port_arguments(parser)
    parser.add_argument("--effects-file", required=True)
    parser.add_argument("--poll-interval-ms", type=int, default=500)
    parser.add_argument("--workers", type=int, default=256)  # every task runs at once
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    _effects.append(args.effects_file)
    task = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=args.poll_interval_ms))
    mcp = FastMCP("bench-task-tool")
    mcp.add_extension(TasksExtension(concurrency=args.workers))
    mcp.tool(task=task)(work)
    run_fastmcp(mcp, args, graceful_shutdown_s=1)


if __name__ == "__main__":
    main()
