"""A minimal, fast Tasks server for benchmarks (official SDK only).

``echo`` answers inline; ``park`` answers with a task that stays ``working``. ``tasks/get``
answers ``working`` for any task id it is asked about (the bench registers handles in the
ledger directly, so 10,000 handles do not need 10,000 creations). A task id of the form
``bench-<interval_ms>-<n>`` gets that ``pollIntervalMs``; others ``--poll-interval-ms``.
An id ``done-<interval_ms>-<k>-<n>`` also completes on its k-th ``tasks/get``.
It counts ``tasks/get`` per task id so the bench can check that no handle was starved; with
``--log-polls`` it also keeps every ``tasks/get`` (task id, server time, the caller's bearer
token as its name) for the ``poll_log`` tool, which the scale-out test reads to check that no
task was polled by two replicas within one interval.
Run: ``python -m bench.fast_tasks_server --port P``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import mcp_types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bridge._mcp.wire.shapes import TASKS_EXTENSION, TaskIdParams
from harness_examples.port_report import add_port_arguments, check_port_arguments, run_uvicorn

TASKS = TASKS_EXTENSION
MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)


def now_iso() -> str:
    """Now as a task timestamp (UTC, milliseconds, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ParkedTasks(Extension):
    identifier = TASKS

    def __init__(self, poll_interval_ms: int, log_polls: bool = False) -> None:
        self.poll_interval_ms = poll_interval_ms
        self.gets: Counter[str] = Counter()
        self.log_polls = log_polls
        self.poll_log: list[tuple[str, float, str]] = []  # (task id, server ms, caller)

    def methods(self) -> Sequence[MethodBinding]:
        return [MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=MODERN)]

    def _task(self, task_id: str) -> dict[str, Any]:
        now = now_iso()
        interval = self.poll_interval_ms
        status = "working"
        parts = task_id.split("-")
        if len(parts) >= 3 and parts[0] in ("bench", "done") and parts[1].isdigit():
            interval = int(parts[1])
        if len(parts) == 4 and parts[0] == "done" and parts[2].isdigit():
            status = "completed" if self.gets[task_id] >= int(parts[2]) else "working"
        task: dict[str, Any] = {
            "taskId": task_id,
            "status": status,
            "createdAt": now,
            "lastUpdatedAt": now,
            "ttlMs": None,
            "pollIntervalMs": interval,
        }
        if status == "completed":
            task["result"] = {"content": [{"type": "text", "text": "done"}], "isError": False}
        return task

    async def intercept_tool_call(
        self,
        params: mcp_types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name != "park":
            return await call_next(ctx)
        return {"resultType": "task", **self._task(secrets.token_urlsafe(24))}

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        self.gets[params.task_id] += 1
        if self.log_polls:
            request = ctx.request
            auth = request.headers.get("authorization", "") if request is not None else ""
            caller = auth.removeprefix("Bearer ") or "anonymous"
            self.poll_log.append((params.task_id, time.monotonic() * 1000, caller))
        return {"resultType": "complete", **self._task(params.task_id)}


def build(poll_interval_ms: int, log_polls: bool = False) -> tuple[MCPServer, ParkedTasks]:
    extension = ParkedTasks(poll_interval_ms, log_polls)
    server = MCPServer("bench-fast-tasks", extensions=[extension])

    @server.tool()
    async def echo(text: str) -> str:
        """Inline echo."""
        return text

    @server.tool()
    async def park() -> str:
        """Answered with a task by the interceptor."""
        raise RuntimeError("answered by the interceptor")

    @server.tool()
    async def poll_counts() -> str:
        """tasks/get count per task id, as JSON."""
        return json.dumps(dict(extension.gets))

    @server.tool()
    async def poll_log(since: int = 0) -> str:
        """Every tasks/get as [task id, server ms, caller] (with --log-polls), as JSON; from
        entry ``since`` on (a driver watching 100,000 handles reads only what is new)."""
        return json.dumps(extension.poll_log[since:])

    return server, extension


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_port_arguments(parser)
    parser.add_argument("--poll-interval-ms", type=int, default=1000)
    parser.add_argument("--log-polls", action="store_true")
    args = parser.parse_args(argv)
    server, _ = build(args.poll_interval_ms, args.log_polls)
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    check_port_arguments(parser, args)
    run_uvicorn(app, args, "127.0.0.1", log_level="warning")


if __name__ == "__main__":
    main()
