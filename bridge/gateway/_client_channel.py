"""The :class:`~bridge.gateway._forwarding.ClientChannel` of one SDK ``tools/call`` request:
its progress token, whether its client takes form elicitation, and how to ask it."""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from bridge.gateway._forwarding import ClientChannel


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

    hears = (params.meta or {}).get("progress_token") is not None
    state = params.request_state
    if state is not None and (not state or len(state) > 200):
        raise MCPError(code=mcp_types.INVALID_PARAMS, message="invalid requestState")
    return ClientChannel(
        progress=progress,
        hears_progress=hears,
        relay=relay if hears else None,
        elicits=_takes_form_elicitation(ctx),
        inline=inline if session.can_send_request else None,
        input_responses=dict(params.input_responses or {}),
        request_state=state,
    )
