"""Reading, streaming, cancelling and deleting responses, and the harness's one vendor
extension (answering an MCP task's input request)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge import AnswerReceipt, InputRequest
from bridge.errors import (
    AnswerRefused,
    InputAlreadyAnswered,
    InvalidAnswer,
    McpSideError,
    NotFound,
    UnknownInputKey,
)
from bridge.uhp.serving import (
    UhpApiError,
    conflict,
    invalid_request,
    json_object,
    not_found,
    resume_start,
    wants_stream,
)
from harness_examples.report_harness.context import (
    authenticate,
    current_body,
    response_or_404,
    runtime_of,
    stream,
)
from harness_examples.report_harness.runtime import VENDOR
from harness_examples.report_harness.store import StoredResponse


async def get_response(request: Request) -> Response:
    principal = authenticate(request)
    stored = await response_or_404(request, principal, request.path_params["response_id"])
    if wants_stream(request):
        return stream(request, stored.id, resume_start(request))
    return JSONResponse(current_body(request, stored))


async def input_items(request: Request) -> Response:
    principal = authenticate(request)
    stored = await response_or_404(request, principal, request.path_params["response_id"])
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
    rt = runtime_of(request)
    principal = authenticate(request)
    stored = await response_or_404(request, principal, request.path_params["response_id"])
    if not stored.terminal:
        await rt.cancel([stored.id])
    # A terminal response is returned unchanged: cancelling twice is not an error.
    fresh = await rt.db(rt.store.get, stored.id)
    return JSONResponse(current_body(request, fresh or stored))


async def _session_or_404(request: Request, principal: str) -> list[StoredResponse]:
    """The session's responses that are not deleted (none: unknown, deleted or not the caller's)."""
    rt = runtime_of(request)
    session_id = request.path_params["session_id"]
    chain: list[StoredResponse] = await rt.db(rt.store.session, principal, session_id)
    chain = [r for r in chain if not r.deleted]
    if not chain:
        raise not_found("session_not_found", f"No session {session_id!r}.")
    return chain


def _session_body(session_id: str, chain: list[StoredResponse]) -> dict[str, Any]:
    return {
        "id": session_id,
        "object": "session",
        "harness_id": chain[0].harness_id,
        "responses": [{"id": r.id, "status": r.status} for r in chain if not r.deleted],
    }


async def get_session(request: Request) -> Response:
    """The session and its responses' statuses (what a client needs to see it still exists)."""
    chain = await _session_or_404(request, authenticate(request))
    return JSONResponse(_session_body(request.path_params["session_id"], chain))


async def cancel_session(request: Request) -> Response:
    rt = runtime_of(request)
    principal = authenticate(request)
    session_id = request.path_params["session_id"]
    chain = await _session_or_404(request, principal)
    in_flight = [r.id for r in chain if not r.terminal]
    await rt.cancel(in_flight)
    chain = await rt.db(rt.store.session, principal, session_id)
    return JSONResponse({**_session_body(session_id, chain), "cancelled_response_ids": in_flight})


async def delete_session(request: Request) -> Response:
    """Cancels what runs in the session first (sessions §6: nothing may go on writing into a
    session that has no owner), then deletes every response of it: all of them answer 404."""
    rt = runtime_of(request)
    principal = authenticate(request)
    chain = await _session_or_404(request, principal)
    await rt.cancel([r.id for r in chain if not r.terminal])
    await rt.db(rt.store.mark_deleted, [r.id for r in chain])
    return JSONResponse(
        {"id": request.path_params["session_id"], "object": "session.deleted", "deleted": True}
    )


async def delete_response(request: Request) -> Response:
    """Deletes the stored response; a running task is NOT cancelled (it runs on, unreadable)."""
    rt = runtime_of(request)
    principal = authenticate(request)
    stored = await response_or_404(request, principal, request.path_params["response_id"])
    await rt.db(rt.store.mark_deleted, [stored.id])
    return JSONResponse({"id": stored.id, "object": "response.deleted", "deleted": True})


async def answer_mcp_input(request: Request) -> Response:
    """Vendor extension: answer a ``bridge.mcp_task.input_required`` event (``ask`` policy).
    Body: ``{"task_ref", "input_ref", "response"}``; for a ``bridge.mcp_call.input_required``
    event (MRTR, no task yet) ``{"op_ref", "input_ref", "response"}`` (the event's ``op_ref``;
    also accepted as ``task_ref``)."""
    rt = runtime_of(request)
    principal = authenticate(request)
    await response_or_404(request, principal, request.path_params["response_id"])
    body = await json_object(request, max_bytes=rt.config.max_body_bytes)
    owner = body.get("op_ref", body.get("task_ref"))
    input_ref = body.get("input_ref")
    if not isinstance(owner, str) or not isinstance(input_ref, str):
        raise invalid_request(
            "'task_ref' (or 'op_ref') and 'input_ref' are required strings.",
            "op_ref" if "op_ref" in body else "task_ref",
            code="invalid_input",
        )
    assert rt.bridge is not None
    try:
        asked = await (await rt.bridge.run_of(principal, owner)).pending_input(owner, input_ref)
        accepted = await _answer(asked, body.get("response"))
    except InvalidAnswer as exc:  # checked before anything was recorded or sent
        raise UhpApiError(
            422,
            "invalid_request_error",
            "invalid_input_answer",
            f"The answer does not fit the request: {exc.detail}",
            param="response",
            detail={"problems": exc.problems},
        ) from None
    except (NotFound, UnknownInputKey):
        raise not_found("input_request_not_found", "No such pending input request.") from None
    except InputAlreadyAnswered:
        raise conflict("input_already_answered", "This input request has an answer.") from None
    except AnswerRefused as exc:  # the MCP server refused it: not delivered, the caller decides
        raise conflict(
            "input_answer_refused", f"The MCP server refused the answer: {exc.reason}"
        ) from None
    except McpSideError as exc:  # recorded; redelivered when the server is reachable again
        raise UhpApiError(
            502, "server_error", "mcp_server_error", f"The answer is recorded, not delivered: {exc}"
        ) from None
    return JSONResponse({"object": f"{VENDOR}.input_answer", "accepted": accepted.delivered})


async def _answer(asked: InputRequest, response: Any) -> AnswerReceipt:
    """An elicitation's ``{"action", "content"}`` through the request's checked methods
    (``InvalidAnswer`` names every problem); another method's result as it is."""
    if asked.method != "elicitation/create":
        return await asked.respond(response)
    if not isinstance(response, dict) or response.get("action") not in _ELICIT_ACTIONS:
        raise InvalidAnswer(asked.input_ref, "action: choose one of accept, decline, cancel")
    action, content = response["action"], response.get("content")
    if action == "accept":
        return await asked.accept(content)
    if content is not None:
        raise InvalidAnswer(asked.input_ref, f"{action} takes no content")
    return await (asked.decline() if action == "decline" else asked.dismiss())


_ELICIT_ACTIONS = ("accept", "decline", "cancel")  # the MCP ElicitResult's actions
