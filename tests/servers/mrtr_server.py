"""A real MRTR server (the official SDK's ``MCPServer``) for end-to-end tests.

Run as ``python -m tests.servers.mrtr_server --port P|0 --port-file F [--effects-file PATH]``.
Its tools answer ``tools/call`` with an ``InputRequiredResult`` (multi-round-trip requests,
MCP 2026-07-28) before doing anything, read the answers from ``ctx.input_responses`` and their
own state from ``ctx.request_state`` on the retry (the SDK seals that state on the wire: the
bridge must echo it verbatim). Each payment really made is appended to the effects file, so a
test can count how often it happened across answers, replays and restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import mcp_types
from mcp.server.mcpserver import Context, MCPServer

from harness_examples.port_report import run_uvicorn
from tests.support.server_main import server_arguments

APPROVAL_SCHEMA: mcp_types.ElicitRequestedSchema = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}},
    "required": ["approve"],
}
NAME_SCHEMA: mcp_types.ElicitRequestedSchema = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}

_effects: Path | None = None
mcp = MCPServer("uhp-bridge-mrtr-test-server")


def _ask(message: str, schema: mcp_types.ElicitRequestedSchema) -> mcp_types.ElicitRequest:
    return mcp_types.ElicitRequest(
        params=mcp_types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


def _answer(ctx: Context, key: str) -> mcp_types.ElicitResult | None:
    answer = (ctx.input_responses or {}).get(key)
    return answer if isinstance(answer, mcp_types.ElicitResult) else None


@mcp.tool()
async def approve_payment(amount: int, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Pay ``amount`` once the user approved it (asked through MRTR, before any work)."""
    approval = _answer(ctx, "approval")
    if approval is None:
        return mcp_types.InputRequiredResult(
            input_requests={"approval": _ask(f"Pay {amount} EUR?", APPROVAL_SCHEMA)},
            request_state=f"payment:{amount}",
        )
    if ctx.request_state != f"payment:{amount}":
        raise ValueError("requestState was not echoed verbatim")
    if approval.action != "accept" or not (approval.content or {}).get("approve"):
        return f"not paid ({approval.action})"
    if _effects is not None:
        with _effects.open("a", encoding="utf-8") as effects:
            effects.write(f"paid {amount}\n")
    return f"paid {amount}"


@mcp.tool()
async def sign_report(title: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Two rounds: ask the author's name, then a confirmation naming it."""
    state = ctx.request_state or ""
    name = _answer(ctx, "name")
    if not state:
        return mcp_types.InputRequiredResult(
            input_requests={"name": _ask("Who signs?", NAME_SCHEMA)}, request_state="round:1"
        )
    if state == "round:1" and name is not None and name.content:
        author = str(name.content["name"])
        question = _ask(f"Sign {title!r} as {author}?", APPROVAL_SCHEMA)
        return mcp_types.InputRequiredResult(
            input_requests={"confirm": question}, request_state=f"round:2:{author}"
        )
    confirm = _answer(ctx, "confirm")
    if state.startswith("round:2:") and confirm is not None:
        return f"{title} signed by {state.removeprefix('round:2:')} ({confirm.action})"
    raise ValueError(f"unexpected round {state!r}")


@mcp.tool()
async def summarise(text: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Asks the client's model (``sampling/createMessage``) through MRTR, then returns its text."""
    reply = (ctx.input_responses or {}).get("summary")
    if isinstance(reply, mcp_types.CreateMessageResult) and isinstance(
        reply.content, mcp_types.TextContent
    ):
        return f"summary: {reply.content.text}"
    message = mcp_types.SamplingMessage(
        role="user", content=mcp_types.TextContent(type="text", text=f"Summarise: {text}")
    )
    params = mcp_types.CreateMessageRequestParams(messages=[message], max_tokens=50)
    return mcp_types.InputRequiredResult(
        input_requests={"summary": mcp_types.CreateMessageRequest(params=params)},
        request_state="summarise",
    )


@mcp.tool()
async def oversized_state(ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Asks with a requestState larger than any client should store (adversarial size)."""
    if ctx.request_state is None:
        question = _ask("Go on?", APPROVAL_SCHEMA)
        return mcp_types.InputRequiredResult(
            input_requests={"go": question}, request_state="x" * 200_000
        )
    return "carried on"


def main(argv: Sequence[str] | None = None) -> None:
    global _effects
    args = server_arguments(
        __doc__,
        argv,
        lambda parser: parser.add_argument("--effects-file", type=Path, default=None),
    )
    _effects = args.effects_file
    run_uvicorn(mcp.streamable_http_app(), args, args.host, log_level="warning")


if __name__ == "__main__":
    main()
