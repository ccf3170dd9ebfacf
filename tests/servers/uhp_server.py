"""A TEST UHP server with FAULT INJECTION, for tests of a UHP *client*. Not for production.

A small but real Unified Harness Protocol server (Starlette, in-memory state only: a restart
forgets everything). The "harness" behind it is a deterministic script, no model: the request's
``input`` string is a space-separated list of directives (other words are ignored):

``words=N``          (default 5) emit N text deltas ``"w0 "``, ``"w1 "``, ... in one message item
``delay_ms=D``       (default 20) pause before each delta
``fail``             end ``failed`` (error code ``harness_error``); partial output is kept
``cut_after=K``      the FIRST stream of this response is closed abruptly (no terminal chunk,
                     no terminal event) after K events were sent on it; the task goes on
``skip_seq=K``       every stream of this response leaves out the event whose sequence is K
``missing_seq_at=K`` the event whose sequence is K is sent without ``sequence_number`` (and
                     without an ``id:`` line), in every stream
``dup_terminal``     the terminal event is sent twice (same sequence number), in every stream
``malformed_at=K``   after the event whose sequence is K, one broken frame ``data: {not json``
``silence_ms=S``     after ``response.created`` the task pauses S ms; meanwhile streams of this
                     response send ``: keep-alive`` every 100 ms (otherwise every 15 s)
``slow_post_ms=S``   the first POST answers only after S ms; the task starts immediately, so a
                     retry with the same Idempotency-Key gets the same response (no delay)
``vendor_events``    also emit ``bridge.mcp_task.created`` / ``bridge.mcp_task.completed``

All ``K`` values above except ``cut_after`` are *sequence numbers* (0-based), not counts. The
stored event log is always correct and gapless; faults exist only on the wire.

Event sequence of ``words=N``: ``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, N x
``response.output_text.delta``, ``response.output_text.done``, ``response.content_part.done``,
``response.output_item.done``, ``response.completed``. A cancelled task ends with
``response.failed`` whose ``response.status`` is ``cancelled``.

Endpoints: ``GET /v1/uhp`` (no auth), ``GET /v1/harnesses[/{id}]``, ``GET /v1/models``,
``POST /v1/responses``, ``GET /v1/responses/{id}`` (``?stream=true`` or
``Accept: text/event-stream`` streams the log after ``Last-Event-ID``, unless resumption is
disabled), ``POST /v1/responses/{id}/cancel``, ``POST /v1/sessions/{id}/cancel``,
``DELETE /v1/responses/{id}`` (not cancelled), ``DELETE /v1/sessions/{id}`` (cancelled first)
and, for tests, ``GET /_test/stats`` (no auth: executions per Idempotency-Key, number of responses).

Run: ``python -m tests.servers.uhp_server --port P [--token T ...] [--no-last-event-id]``
(127.0.0.1 only; ``--token`` may be repeated to get several principals; default
``test-token``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Send

from bridge import events as ev
from bridge._lifecycle import TaskStatus
from bridge.uhp import serving as uhp
from bridge.uhp._adapter import to_uhp_event

VERSIONS = ("2026-08-11", "2026-09-12", "2026-09-28", "2026-10-04")
DEFAULT_VERSION = "2026-09-28"
HARNESS_ID = "chrn_test"
DEFAULT_MODEL = "test-model"
DEFAULT_TOKEN = "test-token"
KEEPALIVE_SECONDS = 15.0
SILENCE_KEEPALIVE_SECONDS = 0.1
#: The sessions chapter asks for a cancel answer within a second; the scripted task stops at
#: once, so the cancel endpoints wait up to this long to answer with the terminal response.
CANCEL_WAIT_SECONDS = 1.0
GRACEFUL_SHUTDOWN_SECONDS = 1

#: Body fields this server acts on. Any other field the request carries is named in
#: ``metadata.ignored_fields``: the reserved ``tools`` and ``include``, and
#: also ``instructions``, ``store``, ``max_step``, ``timeout_seconds``, which the scripted
#: harness does not honour.
KNOWN_FIELDS = frozenset(
    {"input", "model", "metadata", "stream", "background", "previous_response_id"}
)
MALFORMED_FRAME = b"data: {not json\n\n"


def _not_found(what: str, ident: str) -> uhp.UhpApiError:
    return uhp.not_found(f"{what}_not_found", f"No {what} {ident!r}.")


# --------------------------------------------------------------------------- the script


@dataclass(frozen=True)
class Script:
    """The directives parsed from a request's ``input``."""

    words: int = 5
    delay_ms: int = 20
    fail: bool = False
    cut_after: int | None = None
    skip_seq: int | None = None
    missing_seq_at: int | None = None
    dup_terminal: bool = False
    malformed_at: int | None = None
    silence_ms: int = 0
    slow_post_ms: int = 0
    vendor_events: bool = False
    # Request faults: the first ``reject_times`` POSTs with this Idempotency-Key are refused
    # with ``reject_status`` (429 rate_limited, or quota_exhausted with ``quota``; 503; 400),
    # with ``Retry-After`` when ``retry_after_ms`` is given.
    reject_status: int = 0
    reject_times: int = 0
    retry_after_ms: int | None = None
    quota: bool = False

    @classmethod
    def parse(cls, text: str) -> Script:
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for token in text.split():
            name, sep, raw = token.partition("=")
            if name not in kinds:
                continue  # prose, not a directive
            if kinds[name] == "bool":
                if sep:
                    raise uhp.invalid_request(f"Directive {name!r} takes no value.", "input")
                values[name] = True
                continue
            try:
                number = int(raw)
            except ValueError:
                raise uhp.invalid_request(
                    f"Directive {token!r} needs an integer value.", "input"
                ) from None
            if number < 0:
                raise uhp.invalid_request(f"Directive {token!r} must not be negative.", "input")
            values[name] = number
        return cls(**values)


def _scripted_rejection(script: Script) -> uhp.UhpApiError:
    headers = None
    if script.retry_after_ms is not None:
        headers = {"Retry-After": f"{script.retry_after_ms / 1000:.3f}"}
    if script.reject_status == 429:
        code = "quota_exhausted" if script.quota else "rate_limited"
        return uhp.UhpApiError(
            429, "rate_limit_error", code, "Scripted rejection.", headers=headers
        )
    if script.reject_status >= 500:
        return uhp.UhpApiError(
            script.reject_status, "server_error", "harness_unavailable", "Scripted rejection."
        )
    return uhp.invalid_request("Scripted rejection.", code="invalid_input")


def _input_text(value: Any) -> str:
    """The text of ``input``: a string, or the text parts of a list of input items."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise uhp.invalid_request("'input' must be a string or a list of input items.", "input")
    texts: list[str] = []
    for item in value:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            content = item.get("content", item.get("text"))
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.extend(
                    str(part["text"])
                    for part in content
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                )
    return " ".join(texts)


# --------------------------------------------------------------------------- state


@dataclass(eq=False)
class ResponseRecord:
    """One response: its live object, its event log and the task producing both."""

    id: str
    owner: str
    session_id: str
    harness_id: str
    script: Script
    response: dict[str, Any]
    log: uhp.MemoryEventLog = field(default_factory=uhp.MemoryEventLog)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    streams_opened: int = 0
    silent: bool = False

    @property
    def terminal(self) -> bool:
        return self.log.terminal

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.response)

    def emit(self, type_: str, **payload: Any) -> None:
        self.log.append(type_, **payload)

    def finish(self, status: str, error: dict[str, Any] | None = None) -> None:
        self.emit(uhp.settle_response(self.response, status, error), response=self.snapshot())
        self.done.set()

    def cancel(self) -> None:
        if not self.terminal and self.task is not None:
            self.task.cancel()


class ServerState:
    def __init__(
        self, tokens: Sequence[str], resumption: bool, versions: tuple[str, ...] = VERSIONS
    ) -> None:
        # Principals are token digests: the owner of a record is never a token.
        self.auth = uhp.BearerAuth(tokens)
        self.resumption = resumption
        self.versions = versions
        self.responses: dict[str, ResponseRecord] = {}
        self.sessions: dict[str, list[ResponseRecord]] = {}
        self.idempotency = uhp.MemoryKeyStore()
        self.executions: Counter[str] = Counter()
        self.post_attempts: Counter[str] = Counter()  # per idempotency key, rejected or not

    def response_for(self, principal: str, response_id: str) -> ResponseRecord:
        rec = self.responses.get(response_id)
        if rec is None or rec.owner != principal:  # out of scope answers 404, never 403
            raise _not_found("response", response_id)
        return rec

    def session_for(self, principal: str, session_id: str) -> list[ResponseRecord]:
        chain = self.sessions.get(session_id)
        if not chain or chain[0].owner != principal:
            raise _not_found("session", session_id)
        return chain


# --------------------------------------------------------------------------- the harness


async def _run(rec: ResponseRecord) -> None:
    """The scripted harness: appends to ``rec.log`` and never depends on any client."""
    script = rec.script
    try:
        rec.emit("response.created", response=rec.snapshot())
        if script.silence_ms:
            rec.silent = True
            rec.log.signal.notify()  # followers switch to the short keep-alive interval
            await asyncio.sleep(script.silence_ms / 1000)
            rec.silent = False
        rec.emit("response.in_progress", response=rec.snapshot())
        if script.vendor_events:
            _emit_bridge_event(rec, _vendor_created())
        item = uhp.new_message_item()
        rec.response["output"].append(item)
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        rec.emit("response.output_item.added", output_index=0, item=copy.deepcopy(item))
        part = uhp.new_text_part()
        item["content"].append(part)
        rec.emit("response.content_part.added", **where, part=copy.deepcopy(part))
        for index in range(script.words):
            await asyncio.sleep(script.delay_ms / 1000)
            delta = f"w{index} "
            part["text"] += delta
            rec.emit("response.output_text.delta", **where, delta=delta)
        if script.fail:
            item["status"] = "incomplete"
            rec.emit("response.output_item.done", output_index=0, item=copy.deepcopy(item))
            error = {"code": "harness_error", "message": "Scripted failure ('fail' directive)."}
            rec.finish("failed", error)
            return
        rec.emit("response.output_text.done", **where, text=part["text"])
        rec.emit("response.content_part.done", **where, part=copy.deepcopy(part))
        item["status"] = "completed"
        rec.emit("response.output_item.done", output_index=0, item=copy.deepcopy(item))
        if script.vendor_events:
            _emit_bridge_event(rec, _vendor_completed())
        rec.finish("completed")
    except asyncio.CancelledError:
        # Our own task: a cancel request (or server shutdown) ends it as ``cancelled``, with
        # the partial output kept. Swallowed on purpose; nobody awaits this task.
        rec.silent = False
        if not rec.terminal:
            rec.finish("cancelled")


# Vendor events come from the bridge's own adapter, exactly as a harness serving UHP emits them.
_VENDOR_TASK = {"task_ref": "tk_scripted", "tool": "generate_report", "server": "reports"}


def _vendor_created() -> ev.BridgeEvent:
    return ev.TaskCreated(
        seq=2,
        run_ref="run_scripted",
        op_ref="op_scripted",
        status=TaskStatus.WORKING,
        ttl_ms=60_000,
        poll_interval_ms=500,
        **_VENDOR_TASK,
    )


def _vendor_completed() -> ev.BridgeEvent:
    return ev.TaskTerminal(
        seq=4,
        run_ref="run_scripted",
        status=TaskStatus.COMPLETED,
        result={"content": [{"type": "text", "text": "report ready"}], "isError": False},
        **_VENDOR_TASK,
    )


def _emit_bridge_event(rec: ResponseRecord, event: ev.BridgeEvent) -> None:
    body = to_uhp_event(event)
    assert body is not None
    kind = body.pop("type")
    rec.emit(kind, **body)


def _ensure_terminal(rec: ResponseRecord) -> Any:
    """Done-callback: a task cancelled before its first step never entered ``_run``'s
    handler; it still has to end ``cancelled`` in the log."""

    def callback(task: asyncio.Task[None]) -> None:
        if not rec.terminal:
            if not rec.log.events:
                rec.emit("response.created", response=rec.snapshot())
            rec.finish("cancelled")

    return callback


# --------------------------------------------------------------------------- streaming


class _CutConnection(Exception):
    """Raised by a stream generator to drop the connection without finishing the body."""


class CuttableEventStream(uhp.EventStreamResponse):
    """SSE response that can end abruptly: on ``_CutConnection`` the final (empty) body chunk
    is never sent, so uvicorn closes the socket mid-body and the client sees a broken
    transfer, not a clean end of stream."""

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        try:
            async for chunk in self.body_iterator:
                data = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode()
                await send({"type": "http.response.body", "body": data, "more_body": True})
        except _CutConnection:
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _frame(event: uhp.LoggedEvent, with_sequence: bool) -> bytes:
    if with_sequence:
        return event.frame()
    stripped = {k: v for k, v in json.loads(event.data).items() if k != "sequence_number"}
    return uhp.sse_frame(json.dumps(stripped))


async def _follow(rec: ResponseRecord, start: int, first: bool) -> AsyncIterator[bytes]:
    """The log from ``start`` on, live until terminal, with this response's wire faults."""
    script = rec.script
    cut = script.cut_after if first else None
    if cut == 0:
        raise _CutConnection
    sent = 0

    def keepalive_s() -> float:
        return SILENCE_KEEPALIVE_SECONDS if rec.silent else KEEPALIVE_SECONDS

    async for event in uhp.follow_log(rec.log, start, keepalive_s=keepalive_s):
        if event is None:
            yield uhp.KEEPALIVE_FRAME
            continue
        if event.seq == script.skip_seq:
            continue
        frame = _frame(event, with_sequence=event.seq != script.missing_seq_at)
        yield frame
        sent += 1
        if script.dup_terminal and event.terminal:
            yield frame
        if event.seq == script.malformed_at:
            yield MALFORMED_FRAME
        if cut is not None and sent >= cut:
            raise _CutConnection


def _stream(rec: ResponseRecord, start: int = 0) -> Response:
    first = rec.streams_opened == 0
    rec.streams_opened += 1
    return CuttableEventStream(_follow(rec, start, first))


# --------------------------------------------------------------------------- endpoints


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.uhp
    return state


def _authenticate(request: Request) -> str:
    return _state(request).auth.principal(request)


async def discovery(request: Request) -> Response:
    capabilities = {
        "streaming": True,
        "sessions": True,
        "cancellation": True,
        "idempotency": True,
        "stream_resumption": _state(request).resumption,
    }
    versions = _state(request).versions
    default = DEFAULT_VERSION if DEFAULT_VERSION in versions else max(versions)
    return JSONResponse(
        uhp.discovery_document(
            versions=versions,
            default_version=default,
            capabilities=capabilities,
            served=uhp.served_version(request),
        )
    )


_HARNESS = {
    "id": HARNESS_ID,
    "object": "harness",
    "name": "Scripted test harness",
    "base": "scripted",
    "model": DEFAULT_MODEL,
    "description": "Deterministic scripted harness of the UHP test server (no model).",
    "created_at": 0,
}


async def list_harnesses(request: Request) -> Response:
    _authenticate(request)
    return JSONResponse({"object": "list", "data": [_HARNESS]})


async def get_harness(request: Request) -> Response:
    _authenticate(request)
    harness_id = request.path_params["harness_id"]
    if harness_id != HARNESS_ID:
        raise _not_found("harness", harness_id)
    return JSONResponse(_HARNESS)


async def list_models(request: Request) -> Response:
    _authenticate(request)
    model = {"id": DEFAULT_MODEL, "object": "model", "created": 0, "owned_by": "uhp-test-server"}
    return JSONResponse({"object": "list", "data": [model]})


async def _answer(
    request: Request, rec: ResponseRecord, *, stream: bool, background: bool, replay: bool
) -> Response:
    if stream:
        # A first request streams from 0; a repeat (same Idempotency-Key) may resume.
        start = uhp.resume_start(request) if replay and _state(request).resumption else 0
        return _stream(rec, start)
    if not background:
        await rec.done.wait()
    return JSONResponse(rec.snapshot())


async def create_response(request: Request) -> Response:
    state = _state(request)
    principal = _authenticate(request)
    asked = await uhp.read_create_request(request, empty_is_object=True)
    body, stream, background = asked.body, asked.stream, asked.background
    key = asked.idempotency_key
    if key is not None:
        first_id = uhp.replayed_response_id(
            state.idempotency.get(principal, key), asked.fingerprint
        )
        if first_id is not None:  # the first request's response; never a second execution
            first = state.responses[first_id]
            return await _answer(request, first, stream=stream, background=background, replay=True)

    if "input" not in body:
        raise uhp.invalid_request(
            "'input' is required.", "input", code="missing_required_parameter"
        )
    script = Script.parse(_input_text(body["input"]))
    attempt_key = key or _input_text(body["input"])
    state.post_attempts[attempt_key] += 1
    if script.reject_times and state.post_attempts[attempt_key] <= script.reject_times:
        raise _scripted_rejection(script)
    model = body.get("model") or DEFAULT_MODEL
    if not isinstance(model, str):
        raise uhp.invalid_request("'model' must be a string.", "model")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise uhp.invalid_request("'metadata' must be an object.", "metadata")
    harness_id = metadata.get("harness_id") or HARNESS_ID
    if harness_id != HARNESS_ID:
        raise _not_found("harness", str(harness_id))

    previous_id = body.get("previous_response_id")
    if previous_id is not None:
        if not isinstance(previous_id, str):
            raise uhp.invalid_request(
                "'previous_response_id' must be a string.", "previous_response_id"
            )
        previous = state.response_for(principal, previous_id)
        if previous.harness_id != harness_id:
            raise uhp.conflict(
                "harness_mismatch",
                "A session continues with the harness that started it.",
                param="metadata.harness_id",
            )
        session_id = previous.session_id
        busy = [r.id for r in state.sessions[session_id] if not r.terminal]
        if busy:
            raise uhp.conflict(
                "session_busy",
                f"Session {session_id} is running {busy[0]}; retry once it is terminal.",
                detail={"in_flight_response_id": busy[0]},
            )
    else:
        session_id = uhp.new_id("hsess")

    out_metadata = {**metadata, "session_id": session_id, "harness_id": harness_id}
    ignored = uhp.ignored_fields(body, KNOWN_FIELDS)
    if ignored:  # a 2026-08-11 clarification: named at every version served
        out_metadata["ignored_fields"] = ignored
    response_id = uhp.new_id("resp_")
    rec = ResponseRecord(
        id=response_id,
        owner=principal,
        session_id=session_id,
        harness_id=harness_id,
        script=script,
        response=uhp.new_response(
            response_id, model=model, metadata=out_metadata, previous_response_id=previous_id
        ),
    )
    # From the idempotency lookup to here nothing awaits: two concurrent requests with one
    # key cannot both get past the lookup.
    state.responses[response_id] = rec
    state.sessions.setdefault(session_id, []).append(rec)
    if key is not None:
        state.idempotency.record(principal, key, uhp.KeyRecord(response_id, asked.fingerprint))
        state.executions[key] += 1
    rec.task = asyncio.create_task(_run(rec), name=f"uhp-task-{response_id}")
    rec.task.add_done_callback(_ensure_terminal(rec))
    if script.slow_post_ms:
        await asyncio.sleep(script.slow_post_ms / 1000)
    return await _answer(request, rec, stream=stream, background=background, replay=False)


async def get_response(request: Request) -> Response:
    state = _state(request)
    principal = _authenticate(request)
    rec = state.response_for(principal, request.path_params["response_id"])
    if uhp.wants_stream(request) and state.resumption:
        return _stream(rec, uhp.resume_start(request))
    return JSONResponse(rec.snapshot())


async def _cancel_and_wait(recs: Sequence[ResponseRecord]) -> None:
    for rec in recs:
        rec.cancel()
    for rec in recs:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rec.done.wait(), CANCEL_WAIT_SECONDS)


async def cancel_response(request: Request) -> Response:
    principal = _authenticate(request)
    rec = _state(request).response_for(principal, request.path_params["response_id"])
    await _cancel_and_wait([rec])  # a terminal response is returned unchanged
    return JSONResponse(rec.snapshot())


async def cancel_session(request: Request) -> Response:
    principal = _authenticate(request)
    session_id = request.path_params["session_id"]
    chain = _state(request).session_for(principal, session_id)
    in_flight = [rec for rec in chain if not rec.terminal]
    await _cancel_and_wait(in_flight)
    return JSONResponse(
        {
            "id": session_id,
            "object": "session",
            "harness_id": chain[0].harness_id,
            "cancelled_response_ids": [rec.id for rec in in_flight],
            "responses": [{"id": rec.id, "status": rec.response["status"]} for rec in chain],
        }
    )


async def delete_response(request: Request) -> Response:
    """The response is forgotten; a running task is NOT cancelled (tasks §7)."""
    state = _state(request)
    rec = state.response_for(_authenticate(request), request.path_params["response_id"])
    del state.responses[rec.id]
    chain = state.sessions.get(rec.session_id, [])
    chain.remove(rec)
    if not chain:
        state.sessions.pop(rec.session_id, None)
    return JSONResponse({"id": rec.id, "object": "response.deleted", "deleted": True})


async def delete_session(request: Request) -> Response:
    """What runs in the session is cancelled first, then the session and its responses are
    forgotten (sessions §6)."""
    state = _state(request)
    session_id = request.path_params["session_id"]
    chain = state.session_for(_authenticate(request), session_id)
    await _cancel_and_wait([rec for rec in chain if not rec.terminal])
    for rec in chain:
        state.responses.pop(rec.id, None)
    del state.sessions[session_id]
    return JSONResponse({"id": session_id, "object": "session.deleted", "deleted": True})


async def stats(request: Request) -> Response:
    state = _state(request)
    return JSONResponse(
        {
            "executions": dict(state.executions),
            "responses": len(state.responses),
            "post_attempts": dict(state.post_attempts),
        }
    )


# --------------------------------------------------------------------------- app


def create_app(
    tokens: Sequence[str] = (DEFAULT_TOKEN,),
    resumption: bool = True,
    versions: Sequence[str] = VERSIONS,
) -> ASGIApp:
    """The ASGI app (usable in-process too); state lives in the returned app only. ``versions``:
    the UHP versions served, the newest the default."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        tasks = [rec.task for rec in state.responses.values() if rec.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    state = ServerState(tokens, resumption, tuple(versions))
    app = Starlette(
        routes=[
            Route("/v1/uhp", discovery, methods=["GET"]),
            Route("/v1/harnesses", list_harnesses, methods=["GET"]),
            Route("/v1/harnesses/{harness_id}", get_harness, methods=["GET"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/responses", create_response, methods=["POST"]),
            Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
            Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
            Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
            Route("/v1/sessions/{session_id}", delete_session, methods=["DELETE"]),
            Route("/v1/sessions/{session_id}/cancel", cancel_session, methods=["POST"]),
            Route("/_test/stats", stats, methods=["GET"]),
        ],
        exception_handlers=uhp.error_handlers(),
        lifespan=lifespan,
    )
    app.state.uhp = state
    default = DEFAULT_VERSION if DEFAULT_VERSION in versions else max(versions)
    return uhp.VersionNegotiation(app, supported=versions, default=default)


def main(argv: Sequence[str] | None = None) -> None:
    # Imported here: the port handshake is start-up only, the rest of the module is the app.
    from harness_examples.port_report import (
        add_port_arguments,
        check_port_arguments,
        listening_socket,
        uvicorn_server,
    )

    parser = argparse.ArgumentParser(
        description="UHP TEST server with fault injection (tests of UHP clients only)."
    )
    add_port_arguments(parser)
    parser.add_argument(
        "--token",
        action="append",
        help=f"accepted bearer token; repeat for several principals (default {DEFAULT_TOKEN!r})",
    )
    parser.add_argument(
        "--no-last-event-id",
        action="store_true",
        help="disable Last-Event-ID resumption (GET /v1/responses/{id} always answers JSON)",
    )
    parser.add_argument(
        "--version",
        action="append",
        help=f"a UHP version to serve; repeat for several (default {' and '.join(VERSIONS)})",
    )
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    app = create_app(
        args.token or [DEFAULT_TOKEN],
        resumption=not args.no_last_event_id,
        versions=args.version or VERSIONS,
    )
    uhp.scrub_access_log()  # a token given in a query string never reaches the access log
    sock = listening_socket("127.0.0.1", args.port)
    server: uvicorn.Server = uvicorn_server(
        app, sock, args.port_file, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS
    )
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
