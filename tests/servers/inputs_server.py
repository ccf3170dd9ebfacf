"""A real Tasks server (FastMCP + fastmcp-tasks) whose task tools ask every kind of input.

Run as ``python -m tests.servers.inputs_server --port P|0 --port-file F [--host 127.0.0.1]``.
Each task tool parks in ``input_required`` with one input request of one kind — a form
elicitation, a URL-mode elicitation, or ``sampling/createMessage`` — and its second leg reports
the answer it got, so a test sees exactly what the bridge delivered. ``declared_capabilities``
(inline, never a task) echoes the ``io.modelcontextprotocol/clientCapabilities`` the request
carried: what the bridge declared on the wire, as the server received it.

Like most servers, this one does not check the client's declared capabilities before asking
(the spec says it MUST NOT ask for an undeclared kind): that is what lets a test see the
bridge's conservative default for a request it never declared.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

from tests.support.server_main import serve_main

TASK = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=50))
CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
NAME_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1}},
    "required": ["name"],
}

mcp = FastMCP("uhp-bridge-inputs-test-server")
mcp.add_extension(TasksExtension())


@mcp.tool
async def declared_capabilities(ctx: Context) -> str:
    """The client capabilities this request declared (JSON, ``{}`` when none)."""
    context = ctx.request_context
    meta = dict(context.meta or {}) if context is not None else {}
    return json.dumps(meta.get(CAPABILITIES_META_KEY) or {}, sort_keys=True)


def _ask(request: mcp_types.InputRequest) -> mcp_types.InputRequiredResult:
    return mcp_types.InputRequiredResult(input_requests={"ask": request})


def _elicit_answer(ctx: Context) -> str:
    answer = (ctx.input_responses or {}).get("ask")
    if not isinstance(answer, mcp_types.ElicitResult):
        return f"unexpected {type(answer).__name__}"
    if answer.action == "accept":
        return "accepted " + json.dumps(answer.content or {}, sort_keys=True)
    return answer.action


@mcp.tool(task=TASK)
async def ask_name(ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Form elicitation: asks for a non-empty ``name``."""
    if not ctx.input_responses:
        return _ask(
            mcp_types.ElicitRequest(
                params=mcp_types.ElicitRequestFormParams(
                    message="What is your name?", requested_schema=NAME_SCHEMA
                )
            )
        )
    return _elicit_answer(ctx)


@mcp.tool(task=TASK)
async def ask_consent(url: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """URL-mode elicitation: the user should visit ``url`` (the client never opens it)."""
    if not ctx.input_responses:
        return _ask(
            mcp_types.ElicitRequest(
                params=mcp_types.ElicitRequestURLParams(message="Sign in to continue", url=url)
            )
        )
    return _elicit_answer(ctx)


@mcp.tool(task=TASK)
async def ask_model(prompt: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """``sampling/createMessage``: asks the client's model to complete ``prompt``."""
    if not ctx.input_responses:
        message = mcp_types.SamplingMessage(
            role="user", content=mcp_types.TextContent(type="text", text=prompt)
        )
        return _ask(
            mcp_types.CreateMessageRequest(
                params=mcp_types.CreateMessageRequestParams(messages=[message], max_tokens=64)
            )
        )
    answer = (ctx.input_responses or {}).get("ask")
    if isinstance(answer, mcp_types.CreateMessageResult) and isinstance(
        answer.content, mcp_types.TextContent
    ):
        return f"sampled by {answer.model}: {answer.content.text}"
    return f"unexpected {type(answer).__name__}"


def main(argv: Sequence[str] | None = None) -> None:
    serve_main(mcp, argv, description=(__doc__ or "").splitlines()[0])


if __name__ == "__main__":
    main()
