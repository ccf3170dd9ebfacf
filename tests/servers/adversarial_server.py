"""An ADVERSARIAL FAKE Tasks server: malformed and contradictory wire behaviour on purpose.

This server exists only so the bridge's defences can be tested against behaviour no real
server produces (status regressions, reused input keys, malformed task shapes, unknown
statuses, absurd poll intervals, requests that never answer, tasks that vanish, handles that
are huge, empty or reused, error texts quoting the task id, refused updates, tasks created
already terminal, a pollIntervalMs that changes between polls) and HTTP-level
misbehaviour (see :class:`HttpMisbehaviour`: non-JSON 200s, 429/500, a dropped connection).
For the honest path use ``tests.servers.tasks_server`` (a real fastmcp-tasks server).

Built on the official SDK only (``MCPServer`` plus an ``Extension`` serving
``tasks/get|update|cancel`` and intercepting ``tools/call``); the SEP-2663 shapes are flat
dicts written by hand. Run: ``python -m tests.servers.adversarial_server --port P``
(Streamable HTTP at ``/mcp``, 127.0.0.1 only). Every tool except ``stats`` is scripted per
task; ``stats`` reports server-side counters so tests can count polls and calls.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding, require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from bench.task_push import missing_capability
from harness_examples.port_report import run_uvicorn
from tests.support.server_main import server_arguments

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
        "huge_id",
        "empty_id",
        "duplicate_id",
        "refuse_update",
        "quote_id_error",
        "quote_id_result",
        "rate_limited",
        "honest",
        "created_completed",
        "created_completed_bare",
        "created_failed",
        "poll_changing",
        "flood_inputs",
        "huge_question",
        *("get_not_json", "get_rate_limited", "get_wrong_task", "get_trickle", "get_endless_sse"),
    }
)
#: How many input requests ``flood_inputs`` asks at once, and how large ``huge_question`` is.
FLOOD_INPUTS = 1_000
HUGE_QUESTION_BYTES = 4 * 1024 * 1024
#: Tasks whose every tasks/get is answered badly at the HTTP level, by task id prefix: a body
#: that is not JSON, 429, a trickle that never completes, an SSE stream that never ends.
GET_MISBEHAVIOURS = {
    "get_not_json": "gnj-",
    "get_rate_limited": "grl-",
    "get_trickle": "gtr-",
    "get_endless_sse": "ges-",
}
_PREFIX_TOOL = {prefix: tool for tool, prefix in GET_MISBEHAVIOURS.items()}
#: How long a trickle or an endless stream goes on at most (the client gives up long before).
MISBEHAVE_FOR_S = 60.0
#: The task id every ``duplicate_id`` call returns (a reused handle).
DUPLICATE_ID = "dup-" + "d" * 40
#: Task ids of ``rate_limited`` start with this; their first tasks/get is answered 429.
RATE_LIMITED_PREFIX = "rl-"
RETRY_AFTER_S = 1
#: Tools whose tasks stay ``working`` until tasks/cancel (which they then honour).
FOREVER_TOOLS = frozenset({"poll_zero", "poll_huge", "ttl_short"})
_POLL_MS = {"poll_zero": 0, "poll_huge": 10**12, "poll_changing": 60_000}
_TTL_MS = {"ttl_short": 300, "poll_changing": 10**9}
#: poll_changing: the pollIntervalMs of the n-th tasks/get (the last one repeats).
CHANGING_POLL_MS = (60_000, 90_000)


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
        # rate_limited: when each task's tasks/get was answered 429, and the delay (ms) until
        # the next tasks/get of that task arrived.
        self.limited_at: dict[str, float] = {}
        self.retry_gaps_ms: list[int] = []
        self.updates_refused = 0

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
            "retry_gaps_ms": {str(i): gap for i, gap in enumerate(self.retry_gaps_ms)},
            "updates": {"refused": self.updates_refused},
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
                missing_capability()
            require_client_extension(ctx, TASKS)
        if name == "never_reply":
            await anyio.sleep(NEVER_SECONDS)
        if name == "malformed_create":
            return {"resultType": "task", "status": "working"}
        now = _now()
        task = FakeTask(
            task_id=_task_id(name),
            tool=name,
            created_at=now,
            last_updated_at=now,
            ttl_ms=_TTL_MS.get(name, DEFAULT_TTL_MS),
            poll_interval_ms=_POLL_MS.get(name, DEFAULT_POLL_MS),
        )
        if name != "huge_id":  # never asked for again: the bridge must refuse it
            self.tasks[task.task_id] = task
        return {"resultType": "task", **_created(task)}

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
        limited = self.limited_at.pop(task.task_id, None)
        if limited is not None:
            self.retry_gaps_ms.append(int((time.monotonic() - limited) * 1000))
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
        if tool == "get_wrong_task":  # a well-formed reply about another task
            return {**task.wire("working"), "taskId": "another-" + task.task_id[:8]}
        if tool == "undeclared_task":
            return {**task.wire("completed"), "result": _text_result("undeclared")}
        if tool == "vanishing":
            task.vanished = True  # every later tasks/get, update or cancel: -32602
            return task.wire("working")
        if tool in FOREVER_TOOLS and task.cancelled:
            return task.wire("cancelled")
        if tool == "refuse_update":
            # The key embeds the raw task id (servers do that): it must not reach a log.
            key = f"{task.task_id}/approve"
            return {**task.wire("input_required"), "inputRequests": {key: _elicit("ok?")}}
        if tool == "flood_inputs":  # one reply asking for far more than anyone can answer
            asks = {f"ask-{n}": _elicit(f"question {n}?") for n in range(FLOOD_INPUTS)}
            return {**task.wire("input_required"), "inputRequests": asks}
        if tool == "huge_question":
            asks = {"huge": _elicit("x" * HUGE_QUESTION_BYTES)}
            return {**task.wire("input_required"), "inputRequests": asks}
        if tool == "quote_id_error":
            error = {"code": -1, "message": f"job {task.task_id} exploded", "data": [task.task_id]}
            return {
                **task.wire("failed"),
                "statusMessage": f"{task.task_id} failed",
                "error": error,
            }
        if tool == "quote_id_result":
            text = f"report for {task.task_id} ready"
            return {**task.wire("completed"), "result": _text_result(text)}
        if tool in ("created_completed", "created_failed"):
            return _created(task)  # as created: the outcome is on both replies
        if tool == "created_completed_bare":
            task.vanished = True  # its result is never served: tasks/get answers -32602
        if tool == "poll_changing":
            interval = CHANGING_POLL_MS[min(task.gets, len(CHANGING_POLL_MS)) - 1]
            return {**task.wire("working"), "pollIntervalMs": interval}
        if tool in ("honest", "rate_limited", "duplicate_id") and task.gets >= 2:
            return {**task.wire("completed"), "result": _text_result("done")}
        return task.wire("working")

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> HandlerResult:
        task = self._find(ctx, params.task_id)
        if task.tool == "refuse_update":
            # A badly shaped answer refused with -32602 while the task is alive (the code a
            # server also uses for an unknown task): the bridge must not take it as lost.
            self.updates_refused += 1
            raise MCPError(
                code=mcp_types.INVALID_PARAMS,
                message=f"inputResponses for {task.task_id} do not match the requested schema",
            )
        if task.tool == "reuse_key" and "k1" in params.input_responses:
            task.answered_k1 = True
        return {"resultType": "complete"}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        task = self._find(ctx, params.task_id)
        task.cancelled = True
        return {"resultType": "complete"}


def _created(task: FakeTask) -> dict[str, Any]:
    """The CreateTaskResult body; the ``created_*`` tools create their task already terminal
    (with the outcome inlined, or ``created_completed_bare`` without it)."""
    tool = task.tool
    if tool == "created_completed":
        text = f"report {task.task_id} ready at once"
        return {**task.wire("completed"), "result": _text_result(text)}
    if tool == "created_completed_bare":
        return task.wire("completed")
    if tool == "created_failed":
        error = {"code": -32603, "message": f"job {task.task_id} refused at once"}
        return {**task.wire("failed"), "error": error}
    return task.wire("working")


def _task_id(tool: str) -> str:
    if tool == "huge_id":
        return "h" * 1_000_000  # a 1 MB handle
    if tool == "empty_id":
        return ""
    if tool == "duplicate_id":
        return DUPLICATE_ID
    if tool == "rate_limited":
        return RATE_LIMITED_PREFIX + secrets.token_urlsafe(32)
    if tool in GET_MISBEHAVIOURS:
        return GET_MISBEHAVIOURS[tool] + secrets.token_urlsafe(32)
    return secrets.token_urlsafe(32)


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

#: tools/call names answered at the HTTP level, before the MCP server sees them.
HTTP_TOOLS = frozenset(
    {
        *("not_json", "html_200", "rate_limited_call", "server_error", "drop_connection"),
        "abandon_stream",
    }
)
#: The event id ``abandon_stream`` ends its stream after; resumes from it are counted.
ABANDONED_EVENT_ID = "abandon-1"


class HttpMisbehaviour:
    """ASGI middleware misbehaving at the HTTP level, chosen by the ``Mcp-Method`` and
    ``Mcp-Name`` headers (a ``tools/call`` names its tool there, a ``tasks/*`` its task id):

    - ``not_json``: 200, ``application/json``, a body that is not JSON;
    - ``html_200``: 200 with an HTML page;
    - ``rate_limited_call``: 429 with ``Retry-After``;
    - ``server_error``: 500 with a plain-text body;
    - ``drop_connection``: headers and half a body, then the connection is dropped;
    - ``abandon_stream``: an SSE stream with one event (id :data:`ABANDONED_EVENT_ID`) and no
      response; every resume from that id is accepted and ended at once (counted as the call
      ``abandon_stream_resume``);
    - the first ``tasks/get`` of a ``rate_limited`` task (id prefix ``rl-``): 429 with
      ``Retry-After: 1``;
    - every ``tasks/get`` of a ``get_*`` task (:data:`GET_MISBEHAVIOURS`): a body that is not
      JSON, 429, a trickle of whitespace or an SSE stream of keep-alives that never ends.
    """

    def __init__(self, app: Asgi, tasks: AdversarialTasks) -> None:
        self.app = app
        self.tasks = tasks
        self.limited: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method, name = headers.get("mcp-method"), headers.get("mcp-name", "")
        if scope["method"] == "GET" and headers.get("last-event-id") == ABANDONED_EVENT_ID:
            self.tasks.calls["abandon_stream_resume"] += 1  # accepted, then ended: no replay
            await _reply(send, 200, b"", "text/event-stream")
            return
        if method == "tools/call" and name in HTTP_TOOLS:
            self.tasks.calls[name] += 1
            await _drain(receive)
            await self._misbehave(name, send)
            return
        if method == "tasks/get" and name[:4] in GET_MISBEHAVIOURS.values():
            self.tasks.gets[_PREFIX_TOOL[name[:4]]] += 1
            await _drain(receive)
            await _misbehave_on_get(name[:4], send)
            return
        first_get = name.startswith(RATE_LIMITED_PREFIX) and name not in self.limited
        if method == "tasks/get" and first_get:
            self.limited.add(name)
            self.tasks.limited_at[name] = time.monotonic()
            await _drain(receive)
            await _reply(send, 429, b"slow down", "text/plain", retry_after=RETRY_AFTER_S)
            return
        await self.app(scope, receive, send)

    async def _misbehave(self, name: str, send: Send) -> None:
        if name == "abandon_stream":  # one event with an id, then the stream ends: no response
            log = {"level": "info", "data": "x"}
            note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": log})
            note = note.encode()
            event = b"id: " + ABANDONED_EVENT_ID.encode() + b"\ndata: " + note + b"\n\n"
            await _reply(send, 200, event, "text/event-stream")
        elif name == "not_json":
            await _reply(send, 200, b"<html>this is not JSON</html>", "application/json")
        elif name == "html_200":
            await _reply(send, 200, b"<html>maintenance</html>", "text/html")
        elif name == "rate_limited_call":
            await _reply(send, 429, b"slow down", "text/plain", retry_after=RETRY_AFTER_S)
        elif name == "server_error":
            await _reply(send, 500, b"internal error", "text/plain")
        else:  # drop_connection: promise 100 bytes, send 10, then fail the connection
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", b"100"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b'{"jsonrpc"', "more_body": True})
            raise ConnectionAbortedError("adversarial fake: dropping the connection")


async def _misbehave_on_get(prefix: str, send: Send) -> None:
    if prefix == "gnj-":
        await _reply(send, 200, b"<html>not a task</html>", "application/json")
    elif prefix == "grl-":
        await _reply(send, 429, b"slow down", "text/plain", retry_after=RETRY_AFTER_S)
    else:  # a trickle of JSON whitespace, or SSE keep-alives: never a response
        sse = prefix == "ges-"
        content_type = b"text/event-stream" if sse else b"application/json"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", content_type)],
            }
        )
        chunk = b": keep-alive\n\n" if sse else b" "
        with anyio.move_on_after(MISBEHAVE_FOR_S):
            while True:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await anyio.sleep(0.2)
        await send({"type": "http.response.body", "body": b""})


async def _drain(receive: Receive) -> None:
    while (await receive()).get("more_body", False):
        pass


async def _reply(
    send: Send, status: int, body: bytes, content_type: str, *, retry_after: int | None = None
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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


@mcp.tool()
async def slow_echo(text: str, seconds: float) -> str:
    """A plain inline tool that answers after ``seconds`` (an honest call kept in flight)."""
    await anyio.sleep(seconds)
    return text


def main(argv: Sequence[str] | None = None) -> None:
    args = server_arguments("Adversarial fake MCP Tasks server (tests only).", argv)
    # uvicorn directly (not mcp.run) for a short graceful-shutdown window: a hanging
    # never_reply request would otherwise hold SIGTERM until the caller's kill deadline.
    app = mcp.streamable_http_app(streamable_http_path="/mcp", host=args.host)
    run_uvicorn(HttpMisbehaviour(app, extension), args, args.host, timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
