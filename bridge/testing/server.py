"""A small MCP task server to try the bridge against (official ``mcp`` SDK; extra ``[serve]``).

    python -m bridge.testing.server --port 8701 [--host 127.0.0.1] [--token T]
    # Streamable HTTP at http://127.0.0.1:8701/mcp; --port 0 --port-file F picks a free port

Tools:

* ``generate_report(quarter, sections=3, seconds_per_section=0.5)`` — a long-running,
  read-only tool answered with a task handle (``resultType: "task"``, the MCP Tasks extension
  ``io.modelcontextprotocol/tasks``). ``tasks/get`` reports ``working`` with the section being
  written, then ``completed`` with the report text (a pure function of the arguments), also as
  the ``structuredContent`` its ``outputSchema`` advertises; ``tasks/cancel`` cancels it.
* ``approve_payment(amount, payee)`` — a task that asks before it does anything: it starts
  ``input_required`` with one form elicitation (``approve``: a boolean), so a user can try an
  approval (``bridge attention``, ``bridge answer``, the console's inbox). Accepted with
  ``approve: true`` it completes ``paid <amount> to <payee>``; otherwise ``not paid``.
* ``echo(text)`` — answered inline (a plain ``CallToolResult``).

With ``--token`` (or ``$BRIDGE_MCP_TOKEN``) every HTTP request needs ``Authorization: Bearer
<token>``; others are answered ``401``. Tasks live in memory: a restart forgets them.
"""

from __future__ import annotations

import argparse
import hmac
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bridge._extras import require_extra

require_extra("the example task server (bridge.testing.server)", "serve")

import mcp_types
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge._mcp.wire.shapes import (
    INVALID_PARAMS,
    TASKS_EXTENSION,
    TaskIdParams,
    UpdateTaskParams,
)
from bridge.uhp.serving._listening import add_port_arguments, check_port_arguments, run_uvicorn

TOKEN_ENV = "BRIDGE_MCP_TOKEN"
TASK_TOOL = "generate_report"
APPROVAL_TOOL = "approve_payment"
APPROVAL_KEY = "approve"
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "description": "pay it?"}},
    "required": ["approve"],
}
POLL_INTERVAL_MS = 200
TTL_MS = 3_600_000
SECTION_TITLES = ("Revenue", "Costs", "Headcount", "Pipeline", "Risks", "Outlook")
MAX_SECTIONS = 12
MAX_SECONDS_PER_SECTION = 60.0


def render_report(quarter: str, sections: int) -> str:
    """The report text: a pure function of the arguments."""
    lines = [f"Quarterly report {quarter}", f"Sections: {sections}"]
    for index in range(1, sections + 1):
        title = SECTION_TITLES[(index - 1) % len(SECTION_TITLES)]
        lines.append(f"{index}. {title}: {title.lower()} figures for {quarter} are on plan.")
    lines.append(f"End of report {quarter}.")
    return "\n".join(lines)


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


@dataclass
class _Report:
    quarter: str
    sections: int
    seconds_per_section: float
    started: float  # time.time()
    cancelled_at: float | None = None

    def task(self, task_id: str) -> dict[str, Any]:
        now = time.time()
        elapsed = now - self.started
        total = self.sections * self.seconds_per_section
        task = _task_fields(task_id, self.started)
        if self.cancelled_at is not None:
            return {**task, "status": "cancelled", "lastUpdatedAt": _iso(self.cancelled_at)}
        if elapsed >= total:
            text = render_report(self.quarter, self.sections)
            # The tool advertises an ``outputSchema`` (``{"result": string}``, from its return
            # type), so its result carries the matching ``structuredContent``: a client that
            # checks results against the schema (the TypeScript SDK) rejects one without it.
            result = {
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"result": text},
                "isError": False,
            }
            done = {"status": "completed", "lastUpdatedAt": _iso(self.started + total)}
            return {**task, **done, "result": result}
        section = min(int(elapsed // self.seconds_per_section) + 1, self.sections)
        message = f"writing section {section}/{self.sections}"
        return {**task, "status": "working", "lastUpdatedAt": _iso(now), "statusMessage": message}


def _task_fields(task_id: str, started: float) -> dict[str, Any]:
    """What every state of a task says: its id, creation time, TTL and poll interval."""
    return {
        "taskId": task_id,
        "createdAt": _iso(started),
        "ttlMs": TTL_MS,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }


@dataclass
class _Approval:
    """A payment waiting for a person's yes (an ``input_required`` task until answered)."""

    amount: int
    payee: str
    started: float
    answer: Any = None
    answered_at: float | None = None
    cancelled_at: float | None = None

    def task(self, task_id: str) -> dict[str, Any]:
        task = _task_fields(task_id, self.started)
        if self.cancelled_at is not None:
            return {**task, "status": "cancelled", "lastUpdatedAt": _iso(self.cancelled_at)}
        if self.answered_at is None:
            ask = {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": f"Pay {self.amount} to {self.payee}?",
                    "requestedSchema": APPROVAL_SCHEMA,
                },
            }
            waiting = {"status": "input_required", "lastUpdatedAt": _iso(self.started)}
            return {**task, **waiting, "inputRequests": {APPROVAL_KEY: ask}}
        approved = (
            isinstance(self.answer, dict)
            and self.answer.get("action") == "accept"
            and (self.answer.get("content") or {}).get("approve") is True
        )
        text = f"paid {self.amount} to {self.payee}" if approved else "not paid"
        result = {"content": [{"type": "text", "text": text}], "isError": False}
        done = {"status": "completed", "lastUpdatedAt": _iso(self.answered_at)}
        return {**task, **done, "result": result}


def _approval_arguments(arguments: dict[str, Any] | None) -> _Approval:
    args = arguments or {}
    amount, payee = args.get("amount"), args.get("payee")
    if isinstance(amount, bool) or not isinstance(amount, int) or not 1 <= amount <= 10**9:
        raise MCPError(INVALID_PARAMS, "amount: an integer from 1")
    if not isinstance(payee, str) or not 1 <= len(payee) <= 100:
        raise MCPError(INVALID_PARAMS, "payee: a string of 1 to 100 characters")
    return _Approval(amount, payee, time.time())


def _report_arguments(arguments: dict[str, Any] | None) -> _Report:
    args = arguments or {}
    quarter, sections = args.get("quarter"), args.get("sections", 3)
    seconds = args.get("seconds_per_section", 0.5)
    if not isinstance(quarter, str) or not 1 <= len(quarter) <= 32:
        raise MCPError(INVALID_PARAMS, "quarter: a string of 1 to 32 characters")
    if isinstance(sections, bool) or not isinstance(sections, int):
        raise MCPError(INVALID_PARAMS, "sections: an integer")
    if not 1 <= sections <= MAX_SECTIONS:
        raise MCPError(INVALID_PARAMS, f"sections: 1 to {MAX_SECTIONS}")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise MCPError(INVALID_PARAMS, "seconds_per_section: a number")
    if not 0 <= seconds <= MAX_SECONDS_PER_SECTION:
        raise MCPError(INVALID_PARAMS, f"seconds_per_section: 0 to {MAX_SECONDS_PER_SECTION}")
    return _Report(quarter, sections, float(seconds), time.time())


class ReportTasks(Extension):
    """The Tasks extension of this server: ``generate_report`` creates a task; ``tasks/get``
    and ``tasks/cancel`` read and cancel it (tasks kept in memory, by id)."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self.reports: dict[str, _Report | _Approval] = {}

    def methods(self) -> Sequence[MethodBinding]:
        """The ``tasks/*`` methods this server answers (2026-07-28 protocol versions)."""
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=modern),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, protocol_versions=modern),
            MethodBinding("tasks/update", UpdateTaskParams, self.update, protocol_versions=modern),
        ]

    async def intercept_tool_call(
        self,
        params: mcp_types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """``generate_report`` and ``approve_payment`` are answered with a new task handle;
        other tools run inline."""
        report: _Report | _Approval
        if params.name == TASK_TOOL:
            report = _report_arguments(params.arguments)
        elif params.name == APPROVAL_TOOL:
            report = _approval_arguments(params.arguments)
        else:
            return await call_next(ctx)
        task_id = secrets.token_urlsafe(18)
        self.reports[task_id] = report
        return {"resultType": "task", **report.task(task_id)}

    def _report(self, task_id: str) -> _Report | _Approval:
        report = self.reports.get(task_id)
        if report is None:
            raise MCPError(INVALID_PARAMS, "unknown task")
        return report

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        """``tasks/get``: the task's status now (its result once completed)."""
        return {"resultType": "complete", **self._report(params.task_id).task(params.task_id)}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> HandlerResult:
        """``tasks/cancel``: a working task is cancelled; a terminal one stays as it is."""
        report = self._report(params.task_id)
        if report.task(params.task_id)["status"] in ("working", "input_required"):
            report.cancelled_at = time.time()
        return {"resultType": "complete", **report.task(params.task_id)}

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> HandlerResult:
        """``tasks/update``: the answer to an approval's question (the first one counts)."""
        report = self._report(params.task_id)
        answer = params.input_responses.get(APPROVAL_KEY)
        if not isinstance(report, _Approval) or answer is None:
            raise MCPError(INVALID_PARAMS, f"no input request {APPROVAL_KEY!r} waits here")
        if report.answered_at is None and report.cancelled_at is None:
            report.answer, report.answered_at = answer, time.time()
        return {"resultType": "complete"}


def build_server() -> MCPServer:
    """The example server: ``generate_report`` and ``approve_payment`` (tasks), ``echo``."""
    server = MCPServer("bridge-testing-server", extensions=[ReportTasks()])

    @server.tool(annotations=mcp_types.ToolAnnotations(readOnlyHint=True, idempotentHint=True))
    async def generate_report(
        quarter: str, sections: int = 3, seconds_per_section: float = 0.5
    ) -> str:
        """Write a quarterly report, one section at a time (answered with a task handle)."""
        raise RuntimeError("answered by the Tasks extension")  # intercept_tool_call

    @server.tool(annotations=mcp_types.ToolAnnotations(destructiveHint=True, idempotentHint=False))
    async def approve_payment(amount: int, payee: str) -> str:
        """Pay ``amount`` to ``payee`` once a person approves (a task asking for input)."""
        raise RuntimeError("answered by the Tasks extension")  # intercept_tool_call

    @server.tool(annotations=mcp_types.ToolAnnotations(readOnlyHint=True, idempotentHint=True))
    async def echo(text: str) -> str:
        """Answer ``text`` back at once (a plain tool result)."""
        return text

    return server


class RequireBearer:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>`` (compared in
    constant time), or it is answered 401 before it reaches the MCP app."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            sent = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(sent, self._expected):
                body = b'{"error": "invalid_token"}'
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="mcp"'),
                ]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def build_app(token: str | None = None, host: str = "127.0.0.1") -> ASGIApp:
    """The server's Streamable HTTP app at ``/mcp``, behind the bearer check if ``token``."""
    app: ASGIApp = build_server().streamable_http_app(streamable_http_path="/mcp", host=host)
    return RequireBearer(app, token) if token else app


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the example task server over Streamable HTTP until interrupted."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_port_arguments(parser, default_port=8701)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"require this bearer token (default ${TOKEN_ENV}; none: no check)",
    )
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    if args.port_file is None:
        print(f"serving on http://{args.host}:{args.port}/mcp", flush=True)
    run_uvicorn(build_app(args.token, args.host), args, args.host, log_level="warning")


if __name__ == "__main__":
    main()
