"""``POST /v1/responses``: validate the request, create the response (with its idempotency
key, atomically) and start it; a repeated key answers with the first request's response."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge.uhp.serving import (
    UhpApiError,
    budget,
    conflict,
    ignored_fields,
    invalid_request,
    new_id,
    new_response,
    not_found,
    read_create_request,
    refuse_absent_references,
    replayed_response_id,
    resume_start,
    served_version,
)
from harness_examples.report_harness import agent
from harness_examples.report_harness.catalogue import CAPABILITIES
from harness_examples.report_harness.context import (
    authenticate,
    current_body,
    harness_or_404,
    response_or_404,
    runtime_of,
    stream,
)
from harness_examples.report_harness.runtime import LiveRun, Runtime
from harness_examples.report_harness.writes import IdempotencyConflict

#: The fields this harness acts on. ``instructions`` is kept with the request but the scripted
#: agent never reads it, so like every other field it is named in ``metadata.ignored_fields``.
KNOWN_FIELDS = frozenset(
    {
        "input",
        "model",
        "metadata",
        "stream",
        "background",
        "previous_response_id",
        "store",
        "max_step",
        "timeout_seconds",
    }
)


def _invalid_input(message: str, param: str) -> UhpApiError:
    return invalid_request(message, param, code="invalid_input")


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
    rt = runtime_of(request)
    principal = authenticate(request)
    asked = await read_create_request(request, max_bytes=rt.config.max_body_bytes)
    key, wants_stream, background = asked.idempotency_key, asked.stream, asked.background

    async def replayed() -> str | None:
        if key is None:
            return None
        first = await rt.db(rt.store.idempotent, principal, key)
        return replayed_response_id(first, asked.fingerprint)

    if first_id := await replayed():
        return await _answer_existing(request, principal, first_id, wants_stream, background)
    async with rt.create_lock:  # one check-then-create at a time (session_busy, idempotency)
        first_id = await replayed()
        if first_id is None:
            run = await _create(request, rt, principal, asked.body, key, asked.fingerprint)
    if first_id is not None:
        return await _answer_existing(request, principal, first_id, wants_stream, background)
    if wants_stream:
        return stream(request, run.id, 0)
    if not background and (accepted := await _settled(rt, run)) is not None:
        return accepted
    return JSONResponse(run.body)  # rendered here and now: nothing later changes it


async def _settled(rt: Runtime, run: LiveRun) -> Response | None:
    """Wait for the run's end. One whose terminal state the store refuses is answered 202
    with what the store holds (``in_progress``): the work was accepted and ends once the
    store takes the write (GET shows it), so a 5xx, which invites a retry, would be false."""
    await run.done.wait()
    if run.id not in rt.unsettled:
        return None
    stored = await rt.db(rt.store.get, run.id, run.principal)
    if stored is None or stored.terminal:  # it landed meanwhile
        return None if stored is None else JSONResponse(stored.body)
    return JSONResponse(
        stored.body, status_code=202, headers={"Location": f"/v1/responses/{run.id}"}
    )


async def _create(
    request: Request,
    rt: Runtime,
    principal: str,
    body: dict[str, Any],
    key: str | None,
    fingerprint: str,
) -> LiveRun:
    if "input" not in body:
        raise invalid_request("'input' is required.", "input", code="missing_required_parameter")
    try:
        items = agent.normalise_input(body["input"])
    except agent.PlanError as exc:
        raise _invalid_input(str(exc), "input") from None
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise invalid_request("'metadata' must be an object.", "metadata")
    refuse_absent_references(metadata, served_version(request), CAPABILITIES)
    requested_harness = metadata.get("harness_id")
    if requested_harness is not None and not isinstance(requested_harness, str):
        raise _invalid_input("'metadata.harness_id' must be a string.", "metadata.harness_id")
    previous_id = body.get("previous_response_id")
    previous_answer = None
    if previous_id is not None:
        if not isinstance(previous_id, str):
            raise _invalid_input("'previous_response_id' must be a string.", "previous_response_id")
        previous = await rt.db(rt.store.get, previous_id, principal)
        if previous is None:
            raise not_found("response_not_found", f"No response {previous_id!r}.")
        if requested_harness is not None and requested_harness != previous.harness_id:
            raise conflict(
                "harness_mismatch",
                "A session continues with the harness that started it.",
                param="metadata.harness_id",
                detail={"session_harness_id": previous.harness_id},
            )
        if rt.config.harness(previous.harness_id) is None:
            raise not_found("session_expired", "The session's harness is no longer configured.")
        harness = harness_or_404(request, previous.harness_id)
        session_id = previous.session_id
        chain = await rt.db(rt.store.session, principal, session_id)
        busy = [r.id for r in chain if not r.terminal]
        if busy:
            raise conflict(
                "session_busy",
                "The session is running another task; retry once it is terminal.",
                detail={"in_flight_response_id": busy[0]},
            )
        previous_answer = _answer_text(previous.body)
    else:
        harness = (
            harness_or_404(request, requested_harness)
            if requested_harness is not None
            else rt.config.default_harness
        )
        session_id = new_id("hsess")
    text = agent.input_text(items)
    try:
        agent.plan(text, previous_answer)  # refuse malformed instructions up front
    except agent.PlanError as exc:
        raise _invalid_input(str(exc), "input") from None
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid_request("'model' must be a string.", "model")
    out_meta: dict[str, Any] = {**metadata, "session_id": session_id, "harness_id": harness.id}
    if model and model != harness.model:
        out_meta["requested_model"] = model
        out_meta["model_fallback"] = True
        out_meta["model_fallback_reason"] = (
            f"model {model!r} is not available for this harness; ran its default"
        )
    # Unknown and reserved fields are named (tasks §1.1, §1.4), and so is ``store: false``:
    # accepted, but every response is kept.
    not_honoured = ["store"] if body.get("store") is False else []
    ignored = sorted({*ignored_fields(body, KNOWN_FIELDS), *not_honoured})
    if ignored:
        out_meta["ignored_fields"] = ignored
    max_step = budget(body, "max_step")
    timeout = budget(body, "timeout_seconds")
    response_id = new_id("resp_")
    # Always stored (store=false is accepted but not honoured); usage null: no model, no tokens.
    response = new_response(
        response_id, model=harness.model, metadata=out_meta, previous_response_id=previous_id
    )
    agent_request = {
        "text": text,
        "previous_answer": previous_answer,
        "instructions": body.get("instructions"),
        "max_step": max_step if max_step is not None else harness.max_step,
        "timeout_seconds": timeout if timeout is not None else harness.timeout_seconds,
    }
    try:
        await rt.write(
            rt.store.create,
            principal=principal,
            body=response,
            input_items=items,
            request=agent_request,
            idempotency_key=key,
            fingerprint=fingerprint,
        )
    except IdempotencyConflict:  # pragma: no cover - the create lock prevents it
        raise conflict("idempotency_conflict", "Retry the request.") from None
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
    request: Request, principal: str, response_id: str, wants_stream: bool, background: bool
) -> Response:
    """A repeated Idempotency-Key: the first request's response, never a second execution."""
    stored = await response_or_404(request, principal, response_id)
    if wants_stream:
        return stream(request, stored.id, resume_start(request))
    rt = runtime_of(request)
    live = rt.live.get(stored.id)
    if live is not None and not background:
        if (accepted := await _settled(rt, live)) is not None:
            return accepted
        return JSONResponse(live.body)  # rendered here and now
    return JSONResponse(current_body(request, stored))
