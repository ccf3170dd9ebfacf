"""The tools the official MCP conformance suite's server scenarios call, on a real FastMCP
server: ``bridge gateway`` fronts it in ``tests/test_mcp_conformance.py``.

Run as ``python -m tests.servers.conformance_server --port P|0 --port-file F``. Each tool
answers what its scenario's description in ``@modelcontextprotocol/conformance`` asks for
(content of each type, ``isError``, log messages and progress while it runs, a sampling or
elicitation request to the client, a JSON Schema 2020-12 input schema); the gateway lists
and calls them as ``conf__<tool>``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.tools import FunctionTool
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp import MCPError
from mcp_types import TextContent

from tests.support.server_main import serve_main

# A 1x1 red PNG and a 44-byte silent WAV header: the smallest valid payloads of each type.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
        "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00D\xac\x00\x00"
    b"\x88X\x01\x00\x02\x00\x10\x00data\x00\x00\x00\x00"
).decode()
STEP_S = 0.05
TASK = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=50))
CONFIRM_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}

mcp = FastMCP("uhp-bridge-conformance-test-server")
mcp.add_extension(TasksExtension())


def _text(text: str) -> TextContent:
    return TextContent(type="text", text=text)


@mcp.tool
def test_simple_text() -> list[TextContent]:
    """Simple text content."""
    return [_text("This is a simple text response for testing.")]


@mcp.tool
def test_image_content() -> list[mcp_types.ImageContent]:
    """One image."""
    return [mcp_types.ImageContent(type="image", data=PNG, mime_type="image/png")]


@mcp.tool
def test_audio_content() -> list[mcp_types.AudioContent]:
    """One audio clip."""
    return [mcp_types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


def _resource(uri: str, mime: str, text: str) -> mcp_types.EmbeddedResource:
    contents = mcp_types.TextResourceContents(uri=uri, mime_type=mime, text=text)
    return mcp_types.EmbeddedResource(type="resource", resource=contents)


@mcp.tool
def test_embedded_resource() -> list[mcp_types.EmbeddedResource]:
    """An embedded text resource."""
    return [
        _resource("test://embedded-resource", "text/plain", "This is an embedded resource content.")
    ]


@mcp.tool
def test_multiple_content_types() -> list[Any]:
    """Text, image and resource in one result."""
    return [
        _text("Multiple content types test:"),
        mcp_types.ImageContent(type="image", data=PNG, mime_type="image/png"),
        _resource(
            "test://mixed-content-resource",
            "application/json",
            json.dumps({"test": "data", "value": 123}),
        ),
    ]


@mcp.tool
async def test_tool_with_logging(ctx: Context) -> str:
    """Three info log messages while it runs."""
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(message)
        await anyio.sleep(STEP_S)  # the scenario asks for spaced messages
    return "Tool with logging executed successfully"


@mcp.tool
def test_error_handling() -> mcp_types.CallToolResult:
    """Always an ``isError`` result."""
    text = "This tool intentionally returns an error for testing"
    return mcp_types.CallToolResult(content=[_text(text)], is_error=True)


@mcp.tool
async def test_tool_with_progress(ctx: Context) -> str:
    """Progress 0, 50 and 100 of 100."""
    for value in (0, 50, 100):
        await ctx.report_progress(value, 100)
        await anyio.sleep(STEP_S)
    return "Tool with progress executed successfully"


@mcp.tool
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model (``sampling/createMessage``)."""
    message = mcp_types.SamplingMessage(role="user", content=_text(prompt))
    reply = await ctx.session.create_message(
        [message], max_tokens=100, related_request_id=ctx.request_id
    )
    content = reply.content
    text = content.text if isinstance(content, TextContent) else str(content)
    return f"LLM response: {text}"


async def _elicit(ctx: Context, message: str, schema: dict[str, Any]) -> str:
    answer = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    return f"action={answer.action}, content={json.dumps(answer.content or {}, sort_keys=True)}"


@mcp.tool
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user for a username and an email (``elicitation/create``)."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    return "User response: " + await _elicit(ctx, message, schema)


@mcp.tool
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """A form with a default for every primitive type (SEP-1034)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {
                "type": "string",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "default": True},
        },
    }
    return "Elicitation completed: " + await _elicit(ctx, "Please review your details", schema)


@mcp.tool
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """A form with the five enum shapes of SEP-1330."""
    options = ["option1", "option2", "option3"]
    titled = [{"const": o, "title": f"Option {o[-1]}"} for o in options]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {"type": "string", "oneOf": titled},
            "legacyEnum": {
                "type": "string",
                "enum": options,
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {"type": "array", "items": {"anyOf": titled}},
        },
    }
    return "Elicitation completed: " + await _elicit(ctx, "Choose your options", schema)


def json_schema_2020_12_tool(name: str | None = None, address: dict[str, Any] | None = None) -> str:
    """Tool with JSON Schema 2020-12 features"""
    return json.dumps({"name": name, "address": address}, sort_keys=True)


JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


class _ListedAsWritten(FunctionTool):
    """Listed with the input schema the scenario writes: FastMCP would inline its ``$ref``
    and drop ``$defs`` (the gateway in front passes a listed schema through unchanged)."""

    def to_mcp_tool(self, **overrides: Any) -> mcp_types.Tool:
        listed = super().to_mcp_tool(**overrides)
        return listed.model_copy(update={"input_schema": JSON_SCHEMA_2020_12})


mcp.add_tool(_ListedAsWritten.from_function(json_schema_2020_12_tool))


# -- the Tasks extension's fixtures (the 0.2 alpha's tasks-* scenarios) ----------------------
@mcp.tool
def greet(name: str) -> str:
    """Never a task."""
    return f"Hello, {name}!"


@mcp.tool(task=TASK)
async def slow_compute(seconds: float = 0, label: str = "") -> str:
    """A task that sleeps ``seconds`` (cancelled while it sleeps if asked)."""
    await anyio.sleep(seconds)
    return f"computed {label}".strip()


@mcp.tool(task=TASK)
async def failing_job() -> str:
    """A task ending ``completed`` with ``isError``."""
    await anyio.sleep(STEP_S)
    raise ValueError("the job failed")


@mcp.tool(task=TASK)
async def protocol_error_job() -> str:
    """A task ending ``failed`` with its JSON-RPC error."""
    raise MCPError(code=mcp_types.INTERNAL_ERROR, message="the job crashed")


def _asks(*keys: str) -> mcp_types.InputRequiredResult:
    form = mcp_types.ElicitRequestFormParams(
        message="Confirm?", requested_schema=dict(CONFIRM_SCHEMA)
    )
    return mcp_types.InputRequiredResult(
        input_requests={key: mcp_types.ElicitRequest(params=form) for key in keys}
    )


@mcp.tool(task=TASK)
async def confirm_delete(ctx: Context, filename: str = "") -> str | mcp_types.InputRequiredResult:
    """One elicitation, then done."""
    answer = (ctx.input_responses or {}).get("confirm")
    if answer is None:
        return _asks("confirm")
    return f"delete {filename}: {getattr(answer, 'action', '?')}"


@mcp.tool(task=TASK)
async def multi_input(ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Two elicitations pending at once."""
    got = ctx.input_responses or {}
    missing = [key for key in ("first", "second") if key not in got]
    if missing:
        return _asks(*missing)
    return "both answered"


def main(argv: Sequence[str] | None = None) -> None:
    serve_main(mcp, argv, description=(__doc__ or "").splitlines()[0])


if __name__ == "__main__":
    main()
