"""The :class:`~bridge.gateway._forwarding.ClientChannel` of one SDK ``tools/call`` request:
its progress token, whether its client takes form elicitation, and how to ask it; an
upstream's log messages (at or above the level the client set with ``logging/setLevel``) and
elicitations on a direct answer passed on to it."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, get_args

import mcp_types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from bridge._mcp.wire.call_listener import CallListener
from bridge.gateway._forwarding import ClientChannel

_LEVELS: tuple[str, ...] = get_args(mcp_types.LoggingLevel)
# The level each client session set (``logging/setLevel``), by its ``Mcp-Session-Id`` (the
# SDK's session object is not one per client session); unset: every message is passed on.
_SET_LEVELS: OrderedDict[str, mcp_types.LoggingLevel] = OrderedDict()
_LEVELS_KEPT = 4096


def _session_key(ctx: ServerRequestContext[Any, Any]) -> str:
    request = ctx.request
    return str(request.headers.get("mcp-session-id") or "") if request is not None else ""


async def set_logging_level(
    ctx: ServerRequestContext[Any, Any], params: mcp_types.SetLevelRequestParams
) -> mcp_types.EmptyResult:
    key = _session_key(ctx)
    _SET_LEVELS.pop(key, None)
    _SET_LEVELS[key] = params.level
    while len(_SET_LEVELS) > _LEVELS_KEPT:
        _SET_LEVELS.popitem(last=False)
    return mcp_types.EmptyResult()


def _takes_form_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    # An empty ``elicitation: {}`` means form mode (the spec's backwards-compatible reading).
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def client_channel(
    ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
) -> ClientChannel:
    session = ctx.session

    async def progress(value: float, message: str | None) -> None:
        await session.report_progress(value, None, message)  # a no-op without a progressToken

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await session.report_progress(progress, total, message)  # the upstream's, passed on

    async def inline(form: mcp_types.ElicitRequestFormParams) -> mcp_types.ElicitResult:
        return await session.elicit_form(
            form.message, form.requested_schema, related_request_id=ctx.request_id
        )

    async def log(message: mcp_types.LoggingMessageNotificationParams) -> None:
        floor = _SET_LEVELS.get(key)
        if floor is not None and _LEVELS.index(message.level) < _LEVELS.index(floor):
            return
        await session.send_log_message(
            message.level, message.data, message.logger, related_request_id=ctx.request_id
        )

    async def elicit(
        asked: mcp_types.ElicitRequestParams,
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        if not isinstance(asked, mcp_types.ElicitRequestFormParams) or not elicits:
            what = "form" if isinstance(asked, mcp_types.ElicitRequestFormParams) else "url"
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_REQUEST,
                message=f"the gateway's client did not declare {what} elicitation",
            )
        if not session.can_send_request:
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_REQUEST,
                message="the gateway's client connection cannot carry an elicitation request",
            )
        return await inline(asked)

    key = _session_key(ctx)
    elicits = _takes_form_elicitation(ctx)
    hears = (params.meta or {}).get("progress_token") is not None
    state = params.request_state
    if state is not None and (not state or len(state) > 200):
        raise MCPError(code=mcp_types.INVALID_PARAMS, message="invalid requestState")
    return ClientChannel(
        progress=progress,
        hears_progress=hears,
        relay=relay if hears else None,
        elicits=elicits,
        inline=inline if session.can_send_request else None,
        input_responses=dict(params.input_responses or {}),
        request_state=state,
        listener=CallListener(log=log, elicit=elicit, level=_SET_LEVELS.get(key, "debug")),
    )
