"""A minimal, fast Tasks server for benchmarks (official SDK only).

``echo`` answers inline; ``park`` answers with a task that stays ``working``. ``tasks/get``
answers ``working`` for any task id it is asked about (the bench registers handles in the
ledger directly, so 10,000 handles do not need 10,000 creations). A task id of the form
``bench-<interval_ms>-<n>`` gets that ``pollIntervalMs``; others ``--poll-interval-ms``.
It counts ``tasks/get`` per task id so the bench can check
that no handle was starved. Run: ``python -m bench.fast_tasks_server --port P``.
"""

from __future__ import annotations

import argparse
import json
import secrets
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import mcp_types
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

TASKS = "io.modelcontextprotocol/tasks"
MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)


class TaskIdParams(mcp_types.RequestParams):
    task_id: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ParkedTasks(Extension):
    identifier = TASKS

    def __init__(self, poll_interval_ms: int) -> None:
        self.poll_interval_ms = poll_interval_ms
        self.gets: Counter[str] = Counter()

    def methods(self) -> Sequence[MethodBinding]:
        return [MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=MODERN)]

    def _task(self, task_id: str) -> dict[str, Any]:
        now = _now()
        interval = self.poll_interval_ms
        parts = task_id.split("-")
        if len(parts) == 3 and parts[0] == "bench" and parts[1].isdigit():
            interval = int(parts[1])
        return {
            "taskId": task_id,
            "status": "working",
            "createdAt": now,
            "lastUpdatedAt": now,
            "ttlMs": None,
            "pollIntervalMs": interval,
        }

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
        return {"resultType": "complete", **self._task(params.task_id)}


def build(poll_interval_ms: int) -> tuple[MCPServer, ParkedTasks]:
    extension = ParkedTasks(poll_interval_ms)
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

    return server, extension


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--poll-interval-ms", type=int, default=1000)
    args = parser.parse_args(argv)
    server, _ = build(args.poll_interval_ms)
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
