"""An ADVERSARIAL FAKE Tasks server: malformed and contradictory wire behaviour on purpose.

This server exists only so the bridge's defences can be tested against behaviour no real
server produces (status regressions, reused input keys, malformed task shapes, unknown
statuses, absurd poll intervals, requests that never answer, tasks that vanish). For the
honest path use ``tests.servers.tasks_server`` (a real fastmcp-tasks server).

Built on the official SDK only (``MCPServer`` plus an ``Extension`` serving
``tasks/get|update|cancel`` and intercepting ``tools/call``); the SEP-2663 shapes are flat
dicts written by hand. Run: ``python -m tests.servers.adversarial_server --port P``
(Streamable HTTP at ``/mcp``, 127.0.0.1 only). Every tool except ``stats`` is scripted per
task; ``stats`` reports server-side counters so tests can count polls and calls.
"""

from __future__ import annotations

import argparse
import json
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

import anyio
import mcp_types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding, require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from harness_examples.port_report import add_port_arguments, check_port_arguments, run_uvicorn

TASKS = "io.modelcontextprotocol/tasks"
MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
DEFAULT_TTL_MS = 60_000
DEFAULT_POLL_MS = 50
NEVER_SECONDS = 365 * 24 * 3600.0

#: Tools answered with a (scripted) task; everything else is a plain inline tool.
TASK_TOOLS = frozenset(
    {
        "regress",
        "reuse_key",
        "malformed_create",
        "malformed_get",
        "undeclared_task",
        "poll_zero",
        "poll_huge",
        "ttl_short",
        "never_reply",
        "vanishing",
    }
)
#: Tools whose tasks stay ``working`` until tasks/cancel (which they then honour).
FOREVER_TOOLS = frozenset({"poll_zero", "poll_huge", "ttl_short"})
_POLL_MS = {"poll_zero": 0, "poll_huge": 10**12}
_TTL_MS = {"ttl_short": 300}


class TaskIdParams(mcp_types.RequestParams):
    """``tasks/get`` and ``tasks/cancel`` params (``_meta`` parsed by the base class)."""

    task_id: str


class UpdateTaskParams(TaskIdParams):
    """``tasks/update`` params: answers keyed by the server's input request keys."""

    input_responses: dict[str, Any] = Field(default_factory=dict)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def _elicit(message: str) -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {}},
        },
    }


@dataclass
class FakeTask:
    """Server-side record of one scripted task."""

    task_id: str
    tool: str
    created_at: str
    last_updated_at: str
    ttl_ms: int
    poll_interval_ms: int
    status: str = "working"
    gets: int = 0
    answered_k1: bool = False
    cancelled: bool = False
    vanished: bool = False

    def wire(self, status: str) -> dict[str, Any]:
        """The flat Task fields, bumping ``lastUpdatedAt`` when the status changes."""
        if status != self.status:
            self.status, self.last_updated_at = status, _now()
        return {
            "taskId": self.task_id,
            "status": status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_interval_ms,
        }


class AdversarialTasks(Extension):
    """The scripted ``io.modelcontextprotocol/tasks`` implementation plus counters."""

    identifier = TASKS

    def __init__(self) -> None:
        self.tasks: dict[str, FakeTask] = {}
        self.gets: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        # tasks/* requests whose Mcp-Name header did not carry the task id (SEP-2663 MUST).
        self.name_header: Counter[str] = Counter()

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=MODERN),
            MethodBinding("tasks/update", UpdateTaskParams, self.update, protocol_versions=MODERN),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, protocol_versions=MODERN),
        ]

    def stats(self) -> dict[str, dict[str, int]]:
        return {
            "gets": dict(self.gets),
            "calls": dict(self.calls),
            "name_header": dict(self.name_header),
        }

    def _check_name_header(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
        request = ctx.request
        headers = getattr(request, "headers", None)
        sent = headers.get("mcp-name") if headers is not None else None
        self.name_header["ok" if sent == task_id else "missing_or_wrong"] += 1

    async def intercept_tool_call(
        self,
        params: mcp_types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        name = params.name
        self.calls[name] += 1
        if name not in TASK_TOOLS:
            return await call_next(ctx)
        modern = ctx.protocol_version in MODERN
        if not (modern and name == "undeclared_task"):
            # Like a real server: a task-only tool needs the declaration (-32021).
            if not modern:
                _missing_capability()
            require_client_extension(ctx, TASKS)
        if name == "never_reply":
            await anyio.sleep(NEVER_SECONDS)
        if name == "malformed_create":
            return {"resultType": "task", "status": "working"}
        now = _now()
        task = FakeTask(
            task_id=secrets.token_urlsafe(32),
            tool=name,
            created_at=now,
            last_updated_at=now,
            ttl_ms=_TTL_MS.get(name, DEFAULT_TTL_MS),
            poll_interval_ms=_POLL_MS.get(name, DEFAULT_POLL_MS),
        )
        self.tasks[task.task_id] = task
        return {"resultType": "task", **task.wire("working")}

    def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> FakeTask:
        require_client_extension(ctx, TASKS)
        self._check_name_header(ctx, task_id)
        task = self.tasks.get(task_id)
        if task is None or task.vanished:
            raise MCPError(code=mcp_types.INVALID_PARAMS, message=f"Task {task_id} not found")
        return task

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        task = self.tasks.get(params.task_id)
        if task is not None:
            self.gets[task.tool] += 1
            task.gets += 1
        task = self._find(ctx, params.task_id)
        body = self._scripted_get(task)
        return {"resultType": "complete", **body}

    def _scripted_get(self, task: FakeTask) -> dict[str, Any]:
        tool = task.tool
        if tool == "regress":
            if task.gets == 1:
                return {**task.wire("completed"), "result": _text_result("done")}
            return task.wire("working")
        if tool == "reuse_key":
            message = "second?" if task.answered_k1 else "first?"
            return {**task.wire("input_required"), "inputRequests": {"k1": _elicit(message)}}
        if tool == "malformed_get":
            return task.wire("exploded")
        if tool == "undeclared_task":
            return {**task.wire("completed"), "result": _text_result("undeclared")}
        if tool == "vanishing":
            task.vanished = True  # every later tasks/get, update or cancel: -32602
            return task.wire("working")
        if tool in FOREVER_TOOLS and task.cancelled:
            return task.wire("cancelled")
        return task.wire("working")

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> HandlerResult:
        task = self._find(ctx, params.task_id)
        if task.tool == "reuse_key" and "k1" in params.input_responses:
            task.answered_k1 = True
        return {"resultType": "complete"}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        task = self._find(ctx, params.task_id)
        task.cancelled = True
        return {"resultType": "complete"}


def _missing_capability() -> NoReturn:
    data = mcp_types.MissingRequiredClientCapabilityErrorData(
        required_capabilities=mcp_types.ClientCapabilities(extensions={TASKS: {}})
    )
    raise MCPError(
        code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"Client did not declare required extension {TASKS!r}",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


extension = AdversarialTasks()
mcp = MCPServer("uhp-bridge-adversarial-fake", version="0.1.0", extensions=[extension])


def _scripted(name: str) -> None:
    """Register a task tool whose body never runs (the interceptor answers it)."""

    async def body() -> str:
        raise RuntimeError(f"{name} is answered by the tasks interceptor")

    mcp.tool(name=name, description=f"Adversarial scripted task tool {name!r}.")(body)


for _name in sorted(TASK_TOOLS):
    _scripted(_name)


@mcp.tool()
async def stats() -> str:
    """Server-side counters: tasks/get per tool and tools/call per tool (JSON text)."""
    return json.dumps(extension.stats(), sort_keys=True)


@mcp.tool()
async def echo(text: str) -> str:
    """A plain inline tool (no task), for contrast."""
    return text


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Adversarial fake MCP Tasks server (tests only).")
    add_port_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    if args.host != "127.0.0.1":
        parser.error("this test server binds 127.0.0.1 only")
    check_port_arguments(parser, args)
    # uvicorn directly (not mcp.run) for a short graceful-shutdown window: a hanging
    # never_reply request would otherwise hold SIGTERM until the caller's kill deadline.
    app = mcp.streamable_http_app(streamable_http_path="/mcp", host=args.host)
    run_uvicorn(app, args, args.host, timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
