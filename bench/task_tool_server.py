"""A task-tool server for the waiting benchmarks (the official SDK's server and a small Tasks
extension, like ``bench/fast_tasks_server.py``).

``work(key, seconds)`` answers at once with a task that runs ``seconds`` and then completes
with ``done <key>``. Every start and every finish is appended to ``--effects-file``
(``start <key>`` / ``done <key>``), so the bench counts executions on the server side, and so
is every ``tasks/get`` (``get <key>``). ``tasks/get`` answers the task's status (its result
inline once completed) with the ``pollIntervalMs`` given by ``--poll-interval-ms``;
``tasks/cancel`` stops it. With ``--push`` it also serves ``subscriptions/listen`` naming
``taskIds`` (``bench/task_push.py``) and pushes each task's terminal state to the streams naming
it (``notifications/tasks``); without it, the SDK's own listen handler honours no task ids and
clients are left to polling.

Why not FastMCP with ``fastmcp-tasks`` (as the example servers): under 200 concurrent 3-second
calls from the raw SDK on these shared 2-core machines, that stack took 5.1 s to create the
200 tasks and answered ``tasks/get`` 1.5 s late at the median (the last call known terminal
after 8.7 s), so the benchmark measured the server. With this one, in the same conditions: 1.4 s,
0.7 s and 4.9 s. The raw SDK's round beside the harness in section 9 shows what is left.
Run: ``python -m bench.task_tool_server --port P --effects-file F``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding
from mcp.shared.exceptions import MCPError

from bench.fast_tasks_server import MODERN, TASKS, now_iso
from bench.task_push import TaskPushListeners
from bridge._mcp.wire.shapes import TaskIdParams
from harness_examples.port_report import add_port_arguments, check_port_arguments, run_uvicorn


class EffectsFile:
    """``start <key>`` / ``done <key>`` lines, appended whole (one ``write`` each)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def record(self, line: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


@dataclass
class WorkTask:
    key: str
    created_at: str
    status: str = "working"
    updated_at: str = field(default_factory=now_iso)
    runner: asyncio.Task[None] | None = None


class WorkTasks(Extension):
    identifier = TASKS

    def __init__(self, effects: EffectsFile, poll_interval_ms: int, *, push: bool) -> None:
        self.effects = effects
        self.poll_interval_ms = poll_interval_ms
        self.tasks: dict[str, WorkTask] = {}
        self.listeners = TaskPushListeners(self.tasks.__contains__) if push else None

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=MODERN),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, protocol_versions=MODERN),
        ]

    def _view(self, task_id: str, task: WorkTask) -> dict[str, Any]:
        view: dict[str, Any] = {
            "taskId": task_id,
            "status": task.status,
            "createdAt": task.created_at,
            "lastUpdatedAt": task.updated_at,
            "ttlMs": None,
            "pollIntervalMs": self.poll_interval_ms,
        }
        if task.status == "completed":
            text = f"done {task.key}"
            view["result"] = {"content": [{"type": "text", "text": text}], "isError": False}
        return view

    async def _run(self, task_id: str, task: WorkTask, seconds: float) -> None:
        self.effects.record(f"start {task.key}")
        await asyncio.sleep(seconds)
        self.effects.record(f"done {task.key}")
        task.status, task.updated_at = "completed", now_iso()
        self._push(task_id, task)

    def _push(self, task_id: str, task: WorkTask) -> None:
        if self.listeners is not None:
            self.listeners.push(task_id, self._view(task_id, task))

    async def intercept_tool_call(
        self,
        params: mcp_types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name != "work":
            return await call_next(ctx)
        arguments = params.arguments or {}
        task_id = secrets.token_urlsafe(24)
        task = self.tasks[task_id] = WorkTask(str(arguments.get("key")), now_iso())
        seconds = float(arguments.get("seconds", 3.0))
        task.runner = asyncio.create_task(self._run(task_id, task, seconds))
        return {"resultType": "task", **self._view(task_id, task)}

    def _known(self, task_id: str) -> WorkTask:
        task = self.tasks.get(task_id)
        if task is None:
            raise MCPError(code=mcp_types.INVALID_PARAMS, message="unknown task")
        return task

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        task = self._known(params.task_id)
        self.effects.record(f"get {task.key}")
        return {"resultType": "complete", **self._view(params.task_id, task)}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        task = self._known(params.task_id)
        if task.status == "working" and task.runner is not None:
            task.runner.cancel()
            task.status, task.updated_at = "cancelled", now_iso()
            self._push(params.task_id, task)
        return {}


def build(effects_file: str, poll_interval_ms: int, *, push: bool = False) -> MCPServer:
    tasks = WorkTasks(EffectsFile(effects_file), poll_interval_ms, push=push)
    listen = [tasks.listeners.middleware] if tasks.listeners is not None else []
    server = MCPServer("bench-task-tool", extensions=[tasks], middleware=listen)

    @server.tool()
    async def work(key: str, seconds: float = 3.0) -> str:
        """Takes ``seconds`` as a task (answered by the Tasks extension); counted on start
        and on finish."""
        raise RuntimeError("answered by the Tasks extension")

    return server


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_port_arguments(parser)
    parser.add_argument("--effects-file", required=True)
    parser.add_argument("--poll-interval-ms", type=int, default=500)
    parser.add_argument("--push", action="store_true", help="push terminal task states")
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    server = build(args.effects_file, args.poll_interval_ms, push=args.push)
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    run_uvicorn(app, args, "127.0.0.1", log_level="warning")


if __name__ == "__main__":
    main()
