"""An elicitation a server sends while it answers a call directly, tied to no task.

A server that answers ``tools/call`` inline may ask the user something on that call's own
stream (``elicitation/create`` with no related task). There is no task to record it against
and nobody polls for it, so it is answered at once by the form (or URL) handler registered
for that server (``InputHandlers``), its answer checked as every handler's is. Without a
handler (``HOST`` or ``None``: the host answers through recorded task inputs, which this is
not) it is refused with a message saying what to register, never silently.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types

from bridge._answers import build_answer
from bridge._errors import InvalidAnswer
from bridge._ledger.store import input_request_digest
from bridge._mcp.inputs.handlers import (
    Accept,
    Decline,
    Dismiss,
    FormElicitation,
    InputHandlers,
    InputKind,
    UrlElicitation,
    input_kind,
)
from bridge._outcomes import ELICITATION

log = logging.getLogger(__name__)
_DIGEST_CHARS = 24


def direct_input_ref(fields: dict[str, Any]) -> str:
    """A stable name for a direct elicitation (for the handler and the logs)."""
    return f"direct#{input_request_digest(ELICITATION, fields)[:_DIGEST_CHARS]}"


async def answer_direct_elicitation(
    handlers: InputHandlers, server: str, params: mcp_types.ElicitRequestParams
) -> mcp_types.ElicitResult | mcp_types.ErrorData:
    """The registered handler's answer to a direct elicitation of ``server``, or a refusal."""
    fields = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    fields.pop("_meta", None)
    kind = input_kind(ELICITATION, fields)
    chosen = handlers.for_server(server)
    handler = chosen.url if kind is InputKind.URL_ELICITATION else chosen.form
    what = "url" if kind is InputKind.URL_ELICITATION else "form"
    if handler is None or not callable(handler):
        return mcp_types.ErrorData(
            code=mcp_types.INVALID_REQUEST,
            message=f"an elicitation outside a task needs a {what} handler for server "
            f"{server!r} (InputHandlers({what}=...)); none is registered",
        )
    input_ref = direct_input_ref(fields)
    schema: dict[str, Any] | None = None
    asked: FormElicitation | UrlElicitation
    if isinstance(params, mcp_types.ElicitRequestURLParams):
        asked = UrlElicitation(params.message, params.url, server, None, input_ref)
    else:
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        schema = params.requested_schema
        asked = FormElicitation(params.message, schema, server, None, input_ref)
    try:
        answer = await handler(asked)  # type: ignore[arg-type]
        if isinstance(answer, Accept):
            built = build_answer(input_ref, schema, "accept", content=answer.content)
        elif isinstance(answer, Decline | Dismiss):  # a dismissal is the wire's "cancel"
            action = "decline" if isinstance(answer, Decline) else "cancel"
            built = build_answer(input_ref, schema, action)
        else:
            raise TypeError(f"expected Accept, Decline or Dismiss, got {type(answer).__name__}")
    except InvalidAnswer as exc:
        log.warning("direct elicitation %s of %s: invalid answer: %s", input_ref, server, exc)
        return mcp_types.ErrorData(
            code=mcp_types.INTERNAL_ERROR, message="the handler's answer does not fit the form"
        )
    except Exception as exc:  # the handler's trouble is the client's, never the connection's
        log.warning("direct elicitation %s of %s: handler failed: %r", input_ref, server, exc)
        return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message="the handler failed")
    return mcp_types.ElicitResult.model_validate(built)
