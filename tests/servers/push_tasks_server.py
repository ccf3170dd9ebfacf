"""A Tasks server that PUSHES task states (``notifications/tasks``), built on the official SDK.

Neither real server at hand pushes: fastmcp-tasks 4.1.4 removed the push machinery for
SEP-2663 ("in-task input and status are polled, not pushed", ``fastmcp_tasks/creation.py``)
and serves no ``subscriptions/listen``; the official SDK 2.3 server serves it, but its
``ListenHandler`` knows only the core change notifications and leaves ``taskIds`` out of the
acknowledgement. So this server adds the Tasks extension's push on the SDK's own seams:

- an ``Extension`` serving ``tasks/get`` / ``tasks/cancel`` and turning ``tools/call`` of the
  task tools into tasks (flat SEP-2663 shapes, like ``tests.servers.adversarial_server``);
- ``bench.task_push.TaskPushListeners`` (a ``ServerMiddleware``) serving a
  ``subscriptions/listen`` that names ``taskIds``: it acknowledges the ids this server knows,
  then pushes every status change of those tasks as the full task. A listen without
  ``taskIds`` goes on to the SDK's ``ListenHandler``.

Tools: ``push_job`` (a task completing after ``seconds``; honest; with ``hold`` its clock
starts only at ``release_held``, so a test can first wait for a listen stream to name it),
``garbled_push_job``
(ADVERSARIAL: on completion it pushes two malformed frames, while ``tasks/get`` answers the
real result), ``drop_listeners`` (kills every listen connection at the HTTP level and refuses
new listens for ``refuse_s`` seconds), ``slow_acknowledgements`` (each new listen is
acknowledged ``seconds`` after it arrives), ``stats`` (``tasks/get`` per tool, listens, pushes,
and how many task ids the open listen streams name).
Run: ``python -m tests.servers.push_tasks_server --port 0 --port-file F`` (127.0.0.1, ``/mcp``).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding, require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bench.task_push import TASKS, TaskPushListeners
from harness_examples.port_report import run_uvicorn
from tests.servers.adversarial_server import TaskIdParams
from tests.support.server_main import server_arguments

MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
TASK_TOOLS = frozenset({"push_job", "garbled_push_job"})
TTL_MS = 600_000


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class PushTask:
    task_id: str
    tool: str
    poll_interval_ms: int
    created_at: str
    last_updated_at: str
    status: str = "working"
    result: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": TTL_MS,
            "pollIntervalMs": self.poll_interval_ms,
        }
        if self.result is not None:
            body["result"] = self.result
        return body


class PushTasks(Extension):
    """Tasks, their pushes, and the listen streams that receive them."""

    identifier = TASKS

    def __init__(self) -> None:
        self.tasks: dict[str, PushTask] = {}
        self.gets: Counter[str] = Counter()
        self.listeners = TaskPushListeners(self.tasks.__contains__)
        self.released = asyncio.Event()  # set (and replaced) by release_held
        self._jobs: set[asyncio.Task[None]] = set()

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=MODERN),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, protocol_versions=MODERN),
        ]

    async def intercept_tool_call(
        self,
        params: mcp_types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS:
            return await call_next(ctx)
        require_client_extension(ctx, TASKS)
        arguments = params.arguments or {}
        now = _now()
        task = PushTask(
            task_id=secrets.token_urlsafe(32),
            tool=params.name,
            poll_interval_ms=int(arguments.get("poll_ms", 30_000)),
            created_at=now,
            last_updated_at=now,
        )
        self.tasks[task.task_id] = task
        seconds, hold = float(arguments.get("seconds", 0.5)), bool(arguments.get("hold"))
        job = asyncio.get_running_loop().create_task(self._finish(task, seconds, hold))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        return {"resultType": "task", **task.wire()}

    async def _finish(self, task: PushTask, seconds: float, hold: bool) -> None:
        if hold:
            await self.released.wait()
        await asyncio.sleep(seconds)
        if task.status != "working":
            return
        task.status, task.last_updated_at = "completed", _now()
        task.result = {"content": [{"type": "text", "text": f"done {task.tool}"}]}
        if task.tool == "garbled_push_job":
            frame = task.wire()
            self.listeners.push(task.task_id, {**frame, "status": "exploded"})
            self.listeners.push(task.task_id, {k: v for k, v in frame.items() if k != "result"})
        else:
            self.listeners.push(task.task_id, task.wire())

    def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> PushTask:
        require_client_extension(ctx, TASKS)
        task = self.tasks.get(task_id)
        if task is None:
            raise MCPError(code=mcp_types.INVALID_PARAMS, message="Task not found")
        return task

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        task = self._find(ctx, params.task_id)
        self.gets[task.tool] += 1
        return {"resultType": "complete", **task.wire()}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        task = self._find(ctx, params.task_id)
        if task.status == "working":
            task.status, task.last_updated_at = "cancelled", _now()
            self.listeners.push(task.task_id, task.wire())
        return {"resultType": "complete"}

    def release_held(self) -> None:
        released, self.released = self.released, asyncio.Event()
        released.set()

    def stats(self) -> dict[str, dict[str, int]]:
        listeners = self.listeners
        return {
            "gets": dict(self.gets),
            "counts": {"listens": listeners.listens, "pushes": listeners.pushes},
            "listening": {"task_ids": listeners.named()},
        }


class ListenConnectionKiller:
    """ASGI wrapper: ``drop_listeners`` aborts every listen request's HTTP connection
    mid-stream (no result frame, the connection simply dies)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.drop = anyio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] != "http" or headers.get(b"mcp-method") != b"subscriptions/listen":
            await self.app(scope, receive, send)
            return
        drop = self.drop

        async def abort_on_drop() -> None:
            await drop.wait()
            raise ConnectionAbortedError("push test server: dropping the listen connection")

        async with anyio.create_task_group() as group:
            group.start_soon(abort_on_drop)
            await self.app(scope, receive, send)
            group.cancel_scope.cancel()

    def drop_all(self) -> None:
        self.drop.set()
        self.drop = anyio.Event()


extension = PushTasks()
mcp = MCPServer(
    "uhp-bridge-push-tasks",
    version="0.1.0",
    extensions=[extension],
    middleware=[extension.listeners.middleware],
)
killer: ListenConnectionKiller | None = None


def _task_tool(name: str) -> None:
    async def body(seconds: float = 0.5, poll_ms: int = 30_000, hold: bool = False) -> str:
        raise RuntimeError(f"{name} is answered by the tasks interceptor")

    mcp.tool(name=name, description=f"Task tool {name!r} (its state is pushed).")(body)


for _name in sorted(TASK_TOOLS):
    _task_tool(_name)


@mcp.tool()
async def drop_listeners(refuse_s: float = 0.0) -> str:
    """Kill every listen connection; refuse new listens for ``refuse_s`` seconds."""
    extension.listeners.refuse_until = time.monotonic() + refuse_s
    if killer is not None:
        killer.drop_all()
    return "dropped"


@mcp.tool()
async def slow_acknowledgements(seconds: float = 0.0) -> str:
    """Acknowledge each new listen ``seconds`` after it arrives (a busy server); 0 resets."""
    extension.listeners.ack_delay_s = seconds
    return "set"


@mcp.tool()
async def release_held() -> str:
    """Start the clocks of the tasks started with ``hold``."""
    extension.release_held()
    return "released"


@mcp.tool()
async def stats() -> str:
    """Server-side counters (JSON text)."""
    return json.dumps(extension.stats(), sort_keys=True)


def main(argv: Sequence[str] | None = None) -> None:
    global killer
    args = server_arguments("Tasks server that pushes (tests only).", argv)
    app = mcp.streamable_http_app(streamable_http_path="/mcp", host=args.host)
    killer = ListenConnectionKiller(app)
    run_uvicorn(killer, args, args.host, timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
