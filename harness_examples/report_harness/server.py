"""The report harness's UHP server: Starlette app, runtime (live runs) and endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge import (
    Bridge,
    InlineResult,
    McpServerConfig,
    OuterStatus,
    RecoverableFailure,
    RejectedCall,
    TaskPending,
    TaskSettled,
    UnknownOutcome,
    WaitMode,
)
from bridge.errors import ServerConnectFailed
from bridge.uhp.adapter import nested_tasks_summary, to_uhp_event
from harness_examples.report_harness import agent
from harness_examples.report_harness.config import HarnessConfig, HarnessEntry
from harness_examples.report_harness.store import (
    TERMINAL,
    HarnessStore,
    IdempotencyConflict,
    StoredResponse,
)

log = logging.getLogger("report_harness")

VERSIONS = ("2026-08-11",)
DEFAULT_VERSION = "2026-08-11"
CANCEL_ANSWER_SECONDS = 1.0
VENDOR = "report_harness"
_TERMINAL_EVENT = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    "cancelled": "response.failed",
}
TERMINAL_EVENTS = frozenset(_TERMINAL_EVENT.values())
KNOWN_FIELDS = frozenset(
    {
        "input",
        "model",
        "metadata",
        "stream",
        "background",
        "previous_response_id",
        "instructions",
        "store",
        "max_step",
        "timeout_seconds",
    }
)


def principal_of(token: str) -> str:
    """The bridge principal for a bearer token: a digest, never the token itself."""
    return "tok_" + hashlib.sha256(token.encode()).hexdigest()[:24]


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


# --------------------------------------------------------------------------- errors
class ApiError(Exception):
    def __init__(
        self,
        status: int,
        type_: str,
        code: str,
        message: str,
        *,
        param: str | None = None,
        detail: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.type, self.code, self.message = status, type_, code, message
        self.param, self.detail, self.headers = param, detail, headers

    def response(self) -> JSONResponse:
        error = {
            "type": self.type,
            "code": self.code,
            "message": self.message,
            "param": self.param,
            "detail": self.detail,
        }
        return JSONResponse({"error": error}, status_code=self.status, headers=self.headers)


def invalid(message: str, param: str | None = None, code: str = "invalid_input") -> ApiError:
    return ApiError(400, "invalid_request_error", code, message, param=param)


def not_found(code: str, message: str) -> ApiError:
    return ApiError(404, "invalid_request_error", code, message)


# --------------------------------------------------------------------------- live runs
@dataclass(eq=False)
class LiveRun:
    """A response being executed by this process."""

    id: str
    principal: str
    harness: HarnessEntry
    body: dict[str, Any]
    request: dict[str, Any]
    next_seq: int
    step: int
    run_ref: str | None
    bridge_cursor: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    forwarder: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    finishing: bool = False

    @property
    def terminal(self) -> bool:
        return self.body["status"] in TERMINAL

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class Runtime:
    """Owns the store, the bridge and every live run."""

    def __init__(self, config: HarnessConfig, store: HarnessStore, db_url: str) -> None:
        self.config = config
        self.store = store
        self.db_url = db_url
        self.principals = {principal_of(t): t for t in config.tokens}
        self.live: dict[str, LiveRun] = {}
        self.create_lock = asyncio.Lock()
        self.bridge: Bridge | None = None
        self.shutting_down = False
        self.resumed: list[str] = []

    async def db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    # -- lifespan --------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        servers = [
            McpServerConfig(name=s.name, url=s.url, credential_ref=s.credential_ref)
            for h in self.config.harnesses
            for s in h.mcp_servers
            if s.enabled  # disabled servers are never contacted, not even by recovery
        ]
        unique = list({s.name: s for s in servers}.values())
        async with Bridge.open(
            self.db_url,
            principals=sorted(self.principals),
            mcp_servers=unique,
            credentials=self.config.credentials.get,
        ) as bridge:
            self.bridge = bridge
            await self.resume_all()
            try:
                yield
            finally:
                self.shutting_down = True  # stop, but leave in-flight responses resumable
                tasks = [t for r in self.live.values() for t in (r.task, r.forwarder) if t]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self.bridge = None

    async def resume_all(self) -> None:
        """Responses left ``in_progress`` by an earlier process are resumed from their
        persisted step (tool calls are replayed by operation id, so none runs twice)."""
        for stored in await self.db(self.store.in_progress):
            harness = self.config.harness(stored.harness_id)
            run = self._live_from(stored, harness or self.config.default_harness)
            self.live[run.id] = run
            self.resumed.append(run.id)
            if harness is None:
                run.task = asyncio.create_task(
                    self._fail_unresumable(run, "its harness is no longer configured")
                )
            else:
                run.task = asyncio.create_task(self.execute(run, resumed=True))

    def _live_from(self, stored: StoredResponse, harness: HarnessEntry) -> LiveRun:
        return LiveRun(
            id=stored.id,
            principal=stored.principal,
            harness=harness,
            body=stored.body,
            request=stored.request,
            next_seq=stored.next_seq,
            step=stored.step,
            run_ref=stored.bridge_run_ref,
            bridge_cursor=stored.bridge_cursor,
        )

    async def _fail_unresumable(self, run: LiveRun, why: str) -> None:
        await self.finish(
            run,
            "failed",
            {
                "type": "harness_error",
                "code": "harness_error",
                "message": f"The harness restarted and could not resume this task: {why}.",
            },
        )

    # -- the event log ---------------------------------------------------------------------
    async def emit(
        self,
        run: LiveRun,
        type_: str,
        *,
        step: int | None = None,
        forwarded_seq: int | None = None,
        **payload: Any,
    ) -> None:
        async with run.lock:
            if forwarded_seq is not None:
                if forwarded_seq <= run.bridge_cursor:
                    return  # already forwarded
                run.bridge_cursor = forwarded_seq
            if step is not None:
                run.step = step
            seq = run.next_seq
            event = {"type": type_, "sequence_number": seq, **payload}
            # Advance first: a cancellation delivered while the (uncancellable) write runs
            # must not make the next event reuse this number.
            run.next_seq = seq + 1
            try:
                await self.db(
                    self.store.append,
                    run.id,
                    seq,
                    type_,
                    json.dumps(event),
                    json.dumps(run.body),
                    run.body["status"],
                    step=step,
                    bridge_cursor=run.bridge_cursor if forwarded_seq is not None else None,
                )
            except asyncio.CancelledError:
                raise
            except BaseException:
                run.next_seq = seq  # nothing was written
                raise
            finally:
                run.notify()

    def snapshot(self, run: LiveRun) -> dict[str, Any]:
        return copy.deepcopy(run.body)

    # -- starting a run --------------------------------------------------------------------
    def start(self, run: LiveRun) -> None:
        self.live[run.id] = run
        run.task = asyncio.create_task(self.execute(run, resumed=False), name=f"run-{run.id}")

    async def execute(self, run: LiveRun, *, resumed: bool) -> None:
        try:
            budget = run.request.get("timeout_seconds")
            with anyio.fail_after(budget if isinstance(budget, int) and budget > 0 else None):
                await self._execute(run, resumed=resumed)
        except TimeoutError:
            run.body["incomplete_details"] = {"reason": "timeout_seconds"}
            await self.finish(run, "incomplete")
        except asyncio.CancelledError:
            if self.shutting_down:
                raise  # leave it in_progress: the next process resumes it
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await self.finish(run, "cancelled")
        except _Incomplete as exc:
            run.body["incomplete_details"] = {"reason": exc.reason}
            await self.finish(run, "incomplete")
        except Exception as exc:  # the task fails; the server does not
            log.exception("response %s failed", run.id)
            error = {
                "type": "harness_error",
                "code": "harness_error",
                "message": f"The scripted agent failed: {type(exc).__name__}.",
            }
            await self.finish(run, "failed", error)

    async def _execute(self, run: LiveRun, *, resumed: bool) -> None:
        assert self.bridge is not None
        if run.next_seq == 0:
            await self.emit(run, "response.created", response=self.snapshot(run))
            await self.emit(run, "response.in_progress", response=self.snapshot(run))
        if run.run_ref is None:
            view = await self.bridge.register_served_run(
                run.principal,
                response_id=run.id,
                session_id=run.body["metadata"]["session_id"],
                harness_id=run.harness.id,
                harness="report_harness",
            )
            run.run_ref = view.ref
            await self.db(self.store.set_bridge_run, run.id, view.ref)
        if resumed:
            await self.emit(run, f"{VENDOR}.resumed", resumed_at_step=run.step)
            await self._close_open_items(run)
        run.forwarder = asyncio.create_task(self._forward(run))
        steps = agent.plan(run.request["text"], run.request.get("previous_answer"))
        if run.step == 0 and self.config.think_seconds:
            await asyncio.sleep(self.config.think_seconds)
        max_step = run.request.get("max_step")
        tool_steps_done = sum(1 for s in steps[: run.step] if isinstance(s, agent.ToolStep))
        for index in range(run.step, len(steps)):
            step = steps[index]
            if isinstance(step, agent.ToolStep):
                if isinstance(max_step, int) and tool_steps_done >= max_step:
                    raise _Incomplete("max_step")
                await self._tool_step(run, index, step)
                tool_steps_done += 1
            elif isinstance(step, agent.CountStep):
                deltas = [f"{n}\n" for n in range(step.start, step.end + 1)]
                await self._message(run, index, deltas, self.config.count_interval_seconds)
            else:
                text = step.text or agent.summary_text(run.body["output"])
                words = text.split(" ")
                deltas = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
                await self._message(run, index, deltas, self.config.pace_seconds)
        await self.finish(run, "completed")

    async def _close_open_items(self, run: LiveRun) -> None:
        """Items a crash left open end ``incomplete``; their step is re-run as a new item."""
        for index, item in enumerate(run.body["output"]):
            if item.get("status") == "in_progress":
                item["status"] = "incomplete"
                await self.emit(
                    run, "response.output_item.done", output_index=index, item=copy.deepcopy(item)
                )

    async def _message(self, run: LiveRun, index: int, deltas: list[str], pause: float) -> None:
        item: dict[str, Any] = {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        out = run.body["output"]
        out.append(item)
        where = {"item_id": item["id"], "output_index": len(out) - 1}
        await self.emit(run, "response.output_item.added", output_index=len(out) - 1, item=item)
        part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
        item["content"].append(part)
        await self.emit(
            run, "response.content_part.added", **where, content_index=0, part=copy.deepcopy(part)
        )
        for delta in deltas:
            if pause:
                await asyncio.sleep(pause)
            part["text"] += delta
            await self.emit(
                run, "response.output_text.delta", **where, content_index=0, delta=delta
            )
        await self.emit(
            run, "response.output_text.done", **where, content_index=0, text=part["text"]
        )
        await self.emit(
            run, "response.content_part.done", **where, content_index=0, part=copy.deepcopy(part)
        )
        item["status"] = "completed"
        await self.emit(
            run,
            "response.output_item.done",
            output_index=where["output_index"],
            item=copy.deepcopy(item),
            step=index + 1,
        )

    async def _tool_step(self, run: LiveRun, index: int, step: agent.ToolStep) -> None:
        assert self.bridge is not None and run.run_ref is not None
        call_id = f"call_{run.id[5:13]}_{index}"
        arguments = json.dumps(step.arguments, sort_keys=True)
        call = {
            "id": new_id("fc_"),
            "type": "function_call",
            "call_id": call_id,
            "name": f"{step.server}.{step.tool}",
            "arguments": "",
            "status": "in_progress",
        }
        out = run.body["output"]
        out.append(call)
        pos = len(out) - 1
        await self.emit(
            run, "response.output_item.added", output_index=pos, item=copy.deepcopy(call)
        )
        call["arguments"] = arguments
        await self.emit(
            run,
            "response.function_call_arguments.delta",
            item_id=call["id"],
            output_index=pos,
            delta=arguments,
        )
        await self.emit(
            run,
            "response.function_call_arguments.done",
            item_id=call["id"],
            output_index=pos,
            arguments=arguments,
        )
        call["status"] = "completed"
        await self.emit(
            run, "response.output_item.done", output_index=pos, item=copy.deepcopy(call)
        )

        result = await self._call(run, index, step)
        result_item = {
            "id": new_id("fco_"),
            "type": "function_call_output",
            "call_id": call_id,
            "output": json.dumps(result),
            "status": "completed",
        }
        out.append(result_item)
        pos = len(out) - 1
        await self.emit(
            run, "response.output_item.added", output_index=pos, item=copy.deepcopy(result_item)
        )
        await self.emit(
            run,
            "response.output_item.done",
            output_index=pos,
            item=copy.deepcopy(result_item),
            step=index + 1,
        )

    async def _call(self, run: LiveRun, index: int, step: agent.ToolStep) -> dict[str, Any]:
        """One bridged MCP call; the result as the agent sees it (never raises)."""
        assert self.bridge is not None and run.run_ref is not None
        server = run.harness.server(step.server)
        if server is None:
            return {"outcome": "error", "error": f"no MCP server named {step.server!r}"}
        if not server.enabled:
            return {"outcome": "skipped", "error": f"MCP server {step.server!r} is disabled"}
        if step.tool in run.harness.disabled_tools:
            return {"outcome": "skipped", "error": f"tool {step.tool!r} is disabled"}
        mode = WaitMode(step.policy) if step.policy else None
        try:
            outcome = await self.bridge.call_tool(
                run.principal,
                run.run_ref,
                step.server,
                step.tool,
                step.arguments,
                operation_id=f"{run.id}:step-{index}",
                wait=mode,
                wait_deadline_s=self.config.wait_deadline_seconds,
            )
        except ServerConnectFailed as exc:
            await self.emit(
                run,
                f"{VENDOR}.mcp_server.unreachable",
                server=step.server,
                tool=step.tool,
                detail="the MCP server could not be reached; nothing was sent",
            )
            log.warning("response %s: %s", run.id, exc)
            return {"outcome": "server_unreachable", "server": step.server}
        return _describe(outcome)

    async def _forward(self, run: LiveRun) -> None:
        """Bridge events of this run -> vendor events in the response's own log."""
        assert self.bridge is not None and run.run_ref is not None
        async for event in self.bridge.subscribe(
            run.principal, run.run_ref, after_seq=run.bridge_cursor
        ):
            body = to_uhp_event(event)
            if body is None:
                async with run.lock:
                    run.bridge_cursor = max(run.bridge_cursor, event.seq)
                continue
            kind = body.pop("type")
            await self.emit(run, kind, forwarded_seq=event.seq, **body)

    async def _drain(self, run: LiveRun) -> None:
        """Forward what the bridge recorded for this run and was not forwarded yet."""
        if run.forwarder is not None:
            run.forwarder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run.forwarder
        if run.run_ref is None or self.bridge is None:
            return
        tenant = self.bridge.ledger.for_principal(run.principal)
        for event in await self.db(tenant.events, run.run_ref, after_seq=run.bridge_cursor):
            body = to_uhp_event(event)
            if body is not None:
                kind = body.pop("type")
                await self.emit(run, kind, forwarded_seq=event.seq, **body)

    async def finish(self, run: LiveRun, status: str, error: dict[str, Any] | None = None) -> None:
        if run.terminal or run.finishing:
            return
        run.finishing = True  # from here on a cancel request no longer interrupts the task
        try:
            if self.bridge is not None and run.run_ref is not None:
                with contextlib.suppress(Exception):
                    await self.bridge.record_outer_status(
                        run.principal, run.run_ref, OuterStatus(status), error=error
                    )
                await self._drain(run)
                tenant = self.bridge.ledger.for_principal(run.principal)
                summary = await self.db(nested_tasks_summary, tenant, run.run_ref)
                run.body["metadata"].update(summary)
        finally:
            for item in run.body["output"]:
                if item.get("status") == "in_progress":
                    item["status"] = "incomplete"
            run.body["status"] = status
            run.body["error"] = error if status == "failed" else None
            await self.emit(run, _TERMINAL_EVENT[status], response=self.snapshot(run))
            run.done.set()
            self.live.pop(run.id, None)

    # -- cancelling --------------------------------------------------------------------------
    async def cancel(self, response_ids: list[str]) -> None:
        runs = [self.live[r] for r in response_ids if r in self.live]
        for run in runs:
            run.cancel_requested = True
            if run.task is not None and not run.task.done() and not run.finishing:
                run.task.cancel()
        for run in runs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(run.done.wait()), CANCEL_ANSWER_SECONDS)


class _Incomplete(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _describe(outcome: Any) -> dict[str, Any]:
    match outcome:
        case InlineResult():
            return {"outcome": "result", "is_error": outcome.is_error, "result": outcome.result}
        case TaskSettled():
            return {
                "outcome": "task_lost" if outcome.lost else "task_settled",
                "task_ref": outcome.task.ref,
                "status": outcome.status.value,
                "result": outcome.task.result,
                "error": outcome.task.error,
            }
        case TaskPending():
            return {"outcome": "task_pending", "task_ref": outcome.task.ref}
        case RecoverableFailure():
            return {
                "outcome": "step_failed_recoverably",
                "task_ref": outcome.task.ref,
                "reason": outcome.reason,
            }
        case RejectedCall():
            return {"outcome": "rejected", "error": outcome.error}
        case UnknownOutcome():
            return {"outcome": "unknown_outcome", "reason": outcome.reason}
    return {"outcome": type(outcome).__name__}


# --------------------------------------------------------------------------- HTTP layer
def _rt(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def authenticate(request: Request) -> str:
    """The caller's principal (a digest of its bearer token)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    challenge = {"WWW-Authenticate": 'Bearer realm="uhp"'}
    if scheme.lower() != "bearer" or not token:
        raise ApiError(
            401,
            "authentication_error",
            "missing_credential",
            "This endpoint needs an 'Authorization: Bearer <token>' header.",
            headers=challenge,
        )
    principal = principal_of(token)
    stored = _rt(request).principals.get(principal)
    if stored is None or not secrets.compare_digest(stored, token):
        raise ApiError(
            401,
            "authentication_error",
            "invalid_credential",
            "The bearer token is not valid.",
            headers=challenge,
        )
    return principal


def _harness_or_404(request: Request, harness_id: str) -> HarnessEntry:
    harness = _rt(request).config.harness(harness_id)
    if harness is None:
        raise not_found("harness_not_found", f"No harness {harness_id!r}.")
    return harness


async def _response_or_404(request: Request, principal: str, response_id: str) -> StoredResponse:
    stored: StoredResponse | None = await _rt(request).db(
        _rt(request).store.get, response_id, principal
    )
    if stored is None:
        raise not_found("response_not_found", f"No response {response_id!r}.")
    return stored


def _current_body(request: Request, stored: StoredResponse) -> dict[str, Any]:
    live = _rt(request).live.get(stored.id)
    return copy.deepcopy(live.body) if live is not None else stored.body


async def discovery(request: Request) -> Response:
    return JSONResponse(
        {
            "object": "uhp.discovery",
            "protocol": "uhp",
            "versions": list(VERSIONS),
            "default_version": DEFAULT_VERSION,
            "conformance_class": "core",
            "capabilities": {
                "streaming": True,
                "sessions": True,
                "cancellation": True,
                "idempotency": True,
                "stream_resumption": True,
                "files_input": False,
                "files_output": False,
                "session_listing": False,
                "harness_management": False,
                "session_sharing": False,
            },
            "implementation": {"name": "report_harness", "version": "0.1"},
        }
    )


async def list_harnesses(request: Request) -> Response:
    authenticate(request)
    harnesses = [h.public() for h in _rt(request).config.harnesses]
    return JSONResponse({"object": "list", "harnesses": harnesses})


async def get_harness(request: Request) -> Response:
    authenticate(request)
    return JSONResponse(_harness_or_404(request, request.path_params["harness_id"]).public())


def _model(harness: HarnessEntry) -> dict[str, Any]:
    return {
        "id": harness.model,
        "label": f"{harness.model} (scripted, deterministic)",
        "backend": harness.base,
        "available": True,
        "default": True,
    }


async def list_models(request: Request) -> Response:
    authenticate(request)
    backends: dict[str, dict[str, Any]] = {}
    for h in _rt(request).config.harnesses:
        backend = backends.setdefault(h.base, {"default": h.model, "models": []})
        if all(m["id"] != h.model for m in backend["models"]):
            backend["models"].append(_model(h))
    return JSONResponse({"backends": backends})


async def harness_models(request: Request) -> Response:
    authenticate(request)
    h = _harness_or_404(request, request.path_params["harness_id"])
    return JSONResponse(
        {"harness_id": h.id, "backend": h.base, "default": h.model, "models": [_model(h)]}
    )


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        raise invalid("The request body must be a JSON object.", code="invalid_json")
    try:
        body = json.loads(raw)
    except ValueError:
        raise invalid("The request body is not valid JSON.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", code="invalid_json")
    return body


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(f"'{name}' must be a boolean.", name, code="invalid_value")
    return value


def _budget(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise invalid(f"'{name}' must be a non-negative integer.", name, code="invalid_value")
    return value


def _answer_text(body: dict[str, Any]) -> str | None:
    texts = [
        part.get("text", "")
        for item in body.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    ]
    return "".join(texts) if texts else None


async def create_response(request: Request) -> Response:
    rt = _rt(request)
    principal = authenticate(request)
    body = await _json_body(request)
    stream = _flag(body, "stream")
    background = _flag(body, "background")
    key = request.headers.get("idempotency-key")
    if key is not None and (first := await rt.db(rt.store.idempotent, principal, key)):
        return await _answer_existing(request, principal, first, stream, background)
    async with rt.create_lock:  # one check-then-create at a time (session_busy, idempotency)
        if key is not None and (first := await rt.db(rt.store.idempotent, principal, key)):
            replay = True
        else:
            replay = False
            run = await _create(request, rt, principal, body, key)
    if replay:
        return await _answer_existing(request, principal, first, stream, background)
    if stream:
        return _stream(request, run.id, 0)
    if not background:
        await run.done.wait()
    return JSONResponse(copy.deepcopy(run.body))


async def _create(
    request: Request, rt: Runtime, principal: str, body: dict[str, Any], key: str | None
) -> LiveRun:
    if "input" not in body:
        raise invalid("'input' is required.", "input", code="missing_required_parameter")
    try:
        items = agent.normalise_input(body["input"])
    except agent.PlanError as exc:
        raise invalid(str(exc), "input") from None
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise invalid("'metadata' must be an object.", "metadata", code="invalid_value")
    requested_harness = metadata.get("harness_id")
    if requested_harness is not None and not isinstance(requested_harness, str):
        raise invalid("'metadata.harness_id' must be a string.", "metadata.harness_id")
    previous_id = body.get("previous_response_id")
    previous_answer = None
    if previous_id is not None:
        if not isinstance(previous_id, str):
            raise invalid("'previous_response_id' must be a string.", "previous_response_id")
        previous = await rt.db(rt.store.get, previous_id, principal)
        if previous is None:
            raise not_found("response_not_found", f"No response {previous_id!r}.")
        if requested_harness is not None and requested_harness != previous.harness_id:
            raise ApiError(
                409,
                "invalid_request_error",
                "harness_mismatch",
                "A session continues with the harness that started it.",
                param="metadata.harness_id",
                detail={"session_harness_id": previous.harness_id},
            )
        if rt.config.harness(previous.harness_id) is None:
            raise not_found("session_expired", "The session's harness is no longer configured.")
        harness = _harness_or_404(request, previous.harness_id)
        session_id = previous.session_id
        chain = await rt.db(rt.store.session, principal, session_id)
        busy = [r.id for r in chain if not r.terminal]
        if busy:
            raise ApiError(
                409,
                "invalid_request_error",
                "session_busy",
                "The session is running another task; retry once it is terminal.",
                detail={"in_flight_response_id": busy[0]},
            )
        previous_answer = _answer_text(previous.body)
    else:
        harness = (
            _harness_or_404(request, requested_harness)
            if requested_harness is not None
            else rt.config.default_harness
        )
        session_id = new_id("hsess")
    text = agent.input_text(items)
    try:
        agent.plan(text, previous_answer)  # refuse malformed instructions up front
    except agent.PlanError as exc:
        raise invalid(str(exc), "input") from None
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("'model' must be a string.", "model", code="invalid_value")
    out_meta: dict[str, Any] = {**metadata, "session_id": session_id, "harness_id": harness.id}
    if model and model != harness.model:
        out_meta["requested_model"] = model
        out_meta["model_fallback"] = True
        out_meta["model_fallback_reason"] = (
            f"model {model!r} is not available for this harness; ran its default"
        )
    ignored = sorted(set(body) - KNOWN_FIELDS)
    if ignored:
        out_meta["ignored_fields"] = ignored
    max_step = _budget(body, "max_step")
    timeout = _budget(body, "timeout_seconds")
    response_id = new_id("resp_")
    response = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "previous_response_id": previous_id,
        "model": harness.model,
        "output": [],
        "store": True,  # always retained (store=false is accepted but not honoured)
        "usage": None,  # no model, no tokens: honestly unknown rather than a fake zero
        "metadata": out_meta,
    }
    agent_request = {
        "text": text,
        "previous_answer": previous_answer,
        "instructions": body.get("instructions"),
        "max_step": max_step if max_step is not None else harness.max_step,
        "timeout_seconds": timeout if timeout is not None else harness.timeout_seconds,
    }
    try:
        await rt.db(
            rt.store.create,
            principal=principal,
            body=response,
            input_items=items,
            request=agent_request,
            idempotency_key=key,
        )
    except IdempotencyConflict:  # pragma: no cover - the create lock prevents it
        raise ApiError(
            409, "invalid_request_error", "idempotency_conflict", "Retry the request."
        ) from None
    run = LiveRun(
        id=response_id,
        principal=principal,
        harness=harness,
        body=response,
        request=agent_request,
        next_seq=0,
        step=0,
        run_ref=None,
        bridge_cursor=0,
    )
    rt.start(run)
    return run


async def _answer_existing(
    request: Request, principal: str, response_id: str, stream: bool, background: bool
) -> Response:
    """A repeated Idempotency-Key: the first request's response, never a second execution."""
    rt = _rt(request)
    stored = await _response_or_404(request, principal, response_id)
    if stream:
        return _stream(request, stored.id, _resume_from(request))
    live = rt.live.get(stored.id)
    if live is not None and not background:
        await live.done.wait()
        return JSONResponse(copy.deepcopy(live.body))
    return JSONResponse(_current_body(request, stored))


def _resume_from(request: Request) -> int:
    raw = request.headers.get("last-event-id")
    if raw is None or not raw.strip():
        return 0
    try:
        return max(int(raw.strip()) + 1, 0)
    except ValueError:
        raise invalid(
            f"Last-Event-ID {raw.strip()!r} is not a sequence number.",
            "Last-Event-ID",
            code="invalid_value",
        ) from None


def _stream(request: Request, response_id: str, start: int) -> Response:
    rt = _rt(request)
    return StreamingResponse(
        _follow(rt, response_id, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _follow(rt: Runtime, response_id: str, start: int) -> AsyncIterator[bytes]:
    """The persisted log from ``start`` on, then live until the terminal event."""
    after = start - 1
    while True:
        live = rt.live.get(response_id)
        changed = live.changed if live is not None else None  # taken before reading the log
        for seq, type_, data in await rt.db(rt.store.events_after, response_id, after):
            after = seq
            yield f"id: {seq}\ndata: {data}\n\n".encode()
            if type_ in TERMINAL_EVENTS:
                return
        if changed is None:
            stored = await rt.db(rt.store.get, response_id)
            if stored is None or stored.terminal:
                return  # everything was sent (or the response is gone)
            await asyncio.sleep(0.2)  # not yet live (resume starting): look again shortly
            continue
        try:
            await asyncio.wait_for(changed.wait(), rt.config.keepalive_seconds)
        except TimeoutError:
            yield b": keep-alive\n\n"


async def get_response(request: Request) -> Response:
    principal = authenticate(request)
    stored = await _response_or_404(request, principal, request.path_params["response_id"])
    wants_stream = request.query_params.get("stream", "").lower() in {"true", "1"} or (
        "text/event-stream" in request.headers.get("accept", "")
    )
    if wants_stream:
        return _stream(request, stored.id, _resume_from(request))
    return JSONResponse(_current_body(request, stored))


async def input_items(request: Request) -> Response:
    principal = authenticate(request)
    stored = await _response_or_404(request, principal, request.path_params["response_id"])
    data = [{"id": f"msg_{stored.id[5:]}_{i}", **item} for i, item in enumerate(stored.input_items)]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": False,
        }
    )


async def cancel_response(request: Request) -> Response:
    rt = _rt(request)
    principal = authenticate(request)
    stored = await _response_or_404(request, principal, request.path_params["response_id"])
    if not stored.terminal:
        await rt.cancel([stored.id])
    # A terminal response is returned unchanged: cancelling twice is not an error.
    fresh = await rt.db(rt.store.get, stored.id)
    return JSONResponse(_current_body(request, fresh or stored))


async def cancel_session(request: Request) -> Response:
    rt = _rt(request)
    principal = authenticate(request)
    session_id = request.path_params["session_id"]
    chain = await rt.db(rt.store.session, principal, session_id)
    chain = [r for r in chain if not r.deleted]
    if not chain:
        raise not_found("session_not_found", f"No session {session_id!r}.")
    in_flight = [r.id for r in chain if not r.terminal]
    await rt.cancel(in_flight)
    chain = await rt.db(rt.store.session, principal, session_id)
    return JSONResponse(
        {
            "id": session_id,
            "object": "session",
            "harness_id": chain[0].harness_id,
            "cancelled_response_ids": in_flight,
            "responses": [{"id": r.id, "status": r.status} for r in chain if not r.deleted],
        }
    )


async def delete_response(request: Request) -> Response:
    """Deletes the stored response; a running task is NOT cancelled (it runs on, unreadable)."""
    rt = _rt(request)
    principal = authenticate(request)
    stored = await _response_or_404(request, principal, request.path_params["response_id"])
    await rt.db(rt.store.mark_deleted, [stored.id])
    return JSONResponse({"id": stored.id, "object": "response.deleted", "deleted": True})


async def answer_mcp_input(request: Request) -> Response:
    """Vendor extension: answer a ``bridge.mcp_task.input_required`` event (``ask`` policy).
    Body: ``{"task_ref", "input_ref", "response"}``."""
    rt = _rt(request)
    principal = authenticate(request)
    await _response_or_404(request, principal, request.path_params["response_id"])
    body = await _json_body(request)
    task_ref, input_ref = body.get("task_ref"), body.get("input_ref")
    if not isinstance(task_ref, str) or not isinstance(input_ref, str):
        raise invalid("'task_ref' and 'input_ref' are required strings.", "task_ref")
    assert rt.bridge is not None
    try:
        accepted = await rt.bridge.answer_input(
            principal, task_ref, input_ref, body.get("response")
        )
    except Exception:
        raise not_found("input_request_not_found", "No such pending input request.") from None
    return JSONResponse({"object": f"{VENDOR}.input_answer", "accepted": accepted.delivered})


# --------------------------------------------------------------------------- app
class VersionMiddleware:
    """``UHP-Version`` negotiation: refuse unknown versions, stamp every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asked = Headers(scope=scope).get("uhp-version")
        served = DEFAULT_VERSION
        if asked is not None:
            if asked.strip() not in VERSIONS:
                refusal = ApiError(
                    400,
                    "invalid_request_error",
                    "unsupported_protocol_version",
                    f"UHP-Version {asked.strip()!r} is not supported by this server.",
                    param="UHP-Version",
                    detail={"supported": list(VERSIONS)},
                    headers={"UHP-Version": DEFAULT_VERSION},
                )
                await refusal.response()(scope, receive, send)
                return
            served = asked.strip()

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["UHP-Version"] = served
            await send(message)

        await self.app(scope, receive, stamped)


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
    message = {404: "No such endpoint.", 405: "Method not allowed on this endpoint."}.get(
        exc.status_code, "The request is not valid."
    )
    return ApiError(exc.status_code, "invalid_request_error", code, message).response()


async def _on_crash(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return ApiError(500, "server_error", "internal_error", "The server failed.").response()


def create_app(config: HarnessConfig, db_url: str) -> ASGIApp:
    store = HarnessStore.open(db_url)
    runtime = Runtime(config, store, db_url)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with runtime.running():
            yield
        store.close()

    routes = [
        Route("/v1/uhp", discovery, methods=["GET"]),
        Route("/v1/harnesses", list_harnesses, methods=["GET"]),
        Route("/v1/harnesses/{harness_id}", get_harness, methods=["GET"]),
        Route("/v1/harnesses/{harness_id}/models", harness_models, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", input_items, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
        Route("/v1/responses/{response_id}/mcp_inputs", answer_mcp_input, methods=["POST"]),
        Route("/v1/sessions/{session_id}/cancel", cancel_session, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            ApiError: _on_api_error,
            HTTPException: _on_http_error,
            Exception: _on_crash,
        },
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    return VersionMiddleware(app)
