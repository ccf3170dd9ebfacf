"""A real MCP server of the 2025-11-25 generation: experimental tasks from the official SDK 1.x.

Runs ONLY in the separate legacy venv (:mod:`tests.support.legacy_venv`, ``mcp`` 1.30), never
in the bridge's venv: ``.venv-legacy-mcp/bin/python -m tests.servers.legacy_tasks_server_2025_11_25
--port P|0 --port-file F [--effects-file PATH]``. It negotiates protocol ``2025-11-25`` in
``initialize`` and serves the SDK's own experimental tasks: ``capabilities.tasks`` with
``requests.tools.call``, ``execution.taskSupport`` per tool, and the SDK's default handlers
for ``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list`` over its in-memory
task store.

One deviation from the SDK's ``run_task`` helper, on purpose: the work runs in a task group of
the server process, not of the MCP session, and the task ids carry no session scope. With
``run_task`` a task's work is cancelled when the creating session ends and a scoped id is
refused to every other session, so no client restart could ever resume it; this server keeps
its tasks until it is itself restarted (then every handle is gone: ``-32602``).

Input: ``approve_payment`` asks with the SDK's own task API (``ServerTaskContext.elicit``: the
task goes ``input_required`` and the ``elicitation/create``, with the related-task ``_meta``, is
sent on the stream of the client's next ``tasks/result``). A second deviation: the SDK sends a
queued question once, on the ``tasks/result`` that dequeues it; this server asks a question still
unanswered again on every later ``tasks/result`` (:class:`ReaskingQueue`), so a client whose
stream dropped (or that restarted) gets it again.

Tools: ``slow_report`` (optional task; completes after ``seconds``), ``count_effect`` (required
task; appends one line to the effects file, so a test counts how often it really ran),
``wait_forever`` (required task; runs until cancelled), ``approve_payment`` (required task; asks
a form question, appends ``asked <amount>`` to the effects file each time the question is sent,
completes with the answer), ``echo`` (no task support: a plain call), ``confirm_inline`` (no
task support: asks a form question on the call's own stream, tied to no task, and answers with
the reply, or with the refusal as an error result), ``stats`` (how many
requests of each JSON-RPC method this process received, the ``stats`` calls themselves left out).
"""

from __future__ import annotations

import json
import uuid
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import TaskGroup
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.experimental.tasks.message_queue import InMemoryTaskMessageQueue, QueuedMessage
from starlette.applications import Starlette
from starlette.routing import Route

from harness_examples.port_report import run_uvicorn
from tests.servers.effects import append_effect
from tests.support.server_main import server_arguments

TTL_CAP_MS = 600_000  # the server overrides longer requested TTLs (the spec allows it)
GRACEFUL_SHUTDOWN_SECONDS = 1


class ReaskingQueue(InMemoryTaskMessageQueue):
    """The SDK's queue, remembering each request it handed to a ``tasks/result`` until answered,
    so :meth:`reask` can queue the unanswered ones again for the next ``tasks/result``."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: dict[str, list[QueuedMessage]] = {}

    async def dequeue(self, task_id: str) -> QueuedMessage | None:
        message = await super().dequeue(task_id)
        if message is not None and message.resolver is not None:
            self.sent.setdefault(task_id, []).append(message)
            if message.message.method == "elicitation/create":
                _record(f"asked {_asked_about.get(task_id, '?')}")
        return message

    async def reask(self, task_id: str) -> None:
        sent = self.sent.pop(task_id, [])
        waiting = [m for m in sent if m.resolver is not None and not m.resolver.done()]
        for message in waiting:
            await self.enqueue(task_id, message)


queue = ReaskingQueue()
server: Server[Any, Any] = Server("uhp-bridge-legacy-tasks-2025-11-25")
with warnings.catch_warnings():  # serving the deprecated experimental API is the point
    warnings.simplefilter("ignore", DeprecationWarning)
    support = server.experimental.enable_tasks(queue=queue)
_asked_about: dict[str, str] = {}  # task id -> the amount asked about (the effects line)
methods: Counter[str] = Counter()
_work: TaskGroup | None = None
_effects_file: Path | None = None


def _record(line: str) -> None:
    append_effect(_effects_file, line)


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=error)


def _tool(name: str, task_support: str | None, properties: dict[str, Any]) -> types.Tool:
    execution = types.ToolExecution(taskSupport=task_support) if task_support else None
    schema = {"type": "object", "properties": properties}
    return types.Tool(name=name, inputSchema=schema, execution=execution)


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return [
        _tool("slow_report", "optional", {"quarter": {"type": "string"}, "seconds": {}}),
        _tool("count_effect", "required", {"label": {"type": "string"}}),
        _tool("wait_forever", "required", {}),
        _tool("approve_payment", "required", {"amount": {"type": "string"}}),
        _tool("echo", None, {"text": {"type": "string"}}),
        _tool("confirm_inline", None, {"amount": {"type": "string"}}),
        _tool("stats", None, {}),
    ]


async def _slow_report(arguments: dict[str, Any], _task_id: str) -> types.CallToolResult:
    await anyio.sleep(float(arguments.get("seconds", 0.3)))
    return _text(f"report {arguments.get('quarter', '?')}")


async def _count_effect(arguments: dict[str, Any], _task_id: str) -> types.CallToolResult:
    label = str(arguments.get("label", "effect"))
    _record(label)
    return _text(f"effect {label}")


async def _wait_forever(_arguments: dict[str, Any], task_id: str) -> types.CallToolResult:
    while True:  # the SDK's tasks/cancel only flips the stored status: stop when it did
        task = await support.store.get_task(task_id)
        if task is None or task.status == "cancelled":
            _record("wait_forever stopped")
            return _text("stopped")
        await anyio.sleep(0.02)


APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approve"],
}


async def _approve_payment(
    arguments: dict[str, Any], asking: ServerTaskContext
) -> types.CallToolResult:
    amount = str(arguments.get("amount", "?"))
    _asked_about[asking.task_id] = amount
    answer = await asking.elicit(f"Approve a payment of {amount}?", APPROVAL_SCHEMA)
    if answer.action != "accept" or not (answer.content or {}).get("approve"):
        return _text(f"payment of {amount} {answer.action}: not approved")
    note = (answer.content or {}).get("note", "")
    return _text(f"payment of {amount} approved {note}".rstrip())


WORK: dict[str, Callable[[dict[str, Any], str], Awaitable[types.CallToolResult]]] = {
    "slow_report": _slow_report,
    "count_effect": _count_effect,
    "wait_forever": _wait_forever,
}


async def _run(
    task_id: str, tool: str, arguments: dict[str, Any], asking: ServerTaskContext
) -> None:
    try:
        if tool == "approve_payment":
            result = await _approve_payment(arguments, asking)
        else:
            result = await WORK[tool](arguments, task_id)
    except Exception as exc:  # a failed tool is a failed task, as the SDK's run_task does it
        result = _text(str(exc), error=True)
    task = await support.store.get_task(task_id)
    if task is None or task.status in ("completed", "failed", "cancelled"):
        return  # cancelled meanwhile: a terminal status never changes
    await support.store.store_result(task_id, result)
    status = "failed" if result.isError else "completed"
    await support.store.update_task(task_id, status=status)


@server.call_tool()
async def call_tool(
    name: str, arguments: dict[str, Any]
) -> types.CallToolResult | types.CreateTaskResult:
    if name == "echo":
        return _text(str(arguments.get("text", "")))
    if name == "stats":
        return _text(json.dumps(dict(methods)))
    if name == "confirm_inline":  # asks on the call's own stream, tied to no task
        amount = str(arguments.get("amount", "?"))
        session = server.request_context.session
        try:
            answer = await session.elicit_form(
                f"Confirm {amount}?",
                APPROVAL_SCHEMA,
                related_request_id=server.request_context.request_id,  # on the call's stream
            )
        except Exception as exc:  # the client refused: the call says so
            return _text(f"not asked: {exc}", error=True)
        note = (answer.content or {}).get("note", "")
        return _text(f"{amount} {answer.action} {note}".rstrip())
    metadata = server.request_context.experimental.task_metadata
    if metadata is None:  # required task support and no params.task (the spec's -32601 case)
        return _text(f"{name} must be called as a task", error=True)
    ttl = min(metadata.ttl or TTL_CAP_MS, TTL_CAP_MS)
    task_id = str(uuid.uuid4())  # unscoped: any session holding the id may use it
    task = await support.store.create_task(types.TaskMetadata(ttl=ttl), task_id)
    task = await support.store.update_task(task_id, status_message="accepted")
    asking = ServerTaskContext(
        task=task,
        store=support.store,
        session=server.request_context.session,
        queue=support.queue,
        handler=support.handler,
    )
    assert _work is not None
    _work.start_soon(_run, task_id, name, arguments, asking)
    return types.CreateTaskResult(task=task)


@server.experimental.get_task_result()
async def task_result(request: types.GetTaskPayloadRequest) -> types.GetTaskPayloadResult:
    """The SDK's own ``tasks/result`` (send queued requests, block until terminal), after
    queueing the task's unanswered questions again (the re-ask)."""
    await queue.reask(request.params.taskId)
    context = server.request_context
    return await support.handler.handle(request, context.session, context.request_id)


class CountingMcpEndpoint:
    """The Streamable HTTP endpoint, counting each JSON-RPC method it receives."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self._manager = manager

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        if scope.get("method") == "POST":
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            _count(body)
            replayed = False

            async def receive_again() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return dict(await receive())

            await self._manager.handle_request(scope, receive_again, send)
            return
        await self._manager.handle_request(scope, receive, send)


def _count(body: bytes) -> None:
    try:
        message = json.loads(body)
    except ValueError:
        return
    for item in message if isinstance(message, list) else [message]:
        if not isinstance(item, dict) or not isinstance(item.get("method"), str):
            continue
        params = item.get("params")
        if isinstance(params, dict) and params.get("name") == "stats":
            continue  # reading the counters does not count
        methods[item["method"]] += 1


def build_app() -> Starlette:
    manager = StreamableHTTPSessionManager(app=server)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        global _work
        async with anyio.create_task_group() as work, manager.run():
            _work = work
            yield
            work.cancel_scope.cancel()

    endpoint = CountingMcpEndpoint(manager)
    routes = [Route("/mcp", endpoint=endpoint, methods=["GET", "POST", "DELETE"])]
    return Starlette(routes=routes, lifespan=lifespan)


def main(argv: Sequence[str] | None = None) -> None:
    global _effects_file
    args = server_arguments(
        __doc__.splitlines()[0],
        argv,
        lambda parser: parser.add_argument("--effects-file", type=Path, default=None),
    )
    _effects_file = args.effects_file
    run_uvicorn(build_app(), args, args.host, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS)


if __name__ == "__main__":
    main()
