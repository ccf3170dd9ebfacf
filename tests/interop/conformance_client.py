"""The client the official MCP conformance suite's client scenarios launch: the bridge on its
public API (``Bridge``, a served run, ``call_tool``), pointed at the suite's server.

The suite runs ``python tests/interop/conformance_client.py <server url>`` with the scenario
in ``MCP_CONFORMANCE_SCENARIO``; what the bridge sends that server is what the suite checks.
Every scenario gets the same client: connect, list the tools, then make the calls the
scenario's context names (``MCP_CONFORMANCE_CONTEXT``'s ``toolCalls``), or else call each
listed tool with arguments filled from its input schema (numbers 1, 2, …; strings "x"; an
object named ``schema``: another listed tool's input schema, as received); a form
elicitation is answered by accepting the form's defaults. The OAuth scenarios are not run
(docs/compatibility.md says why).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from bridge import (
    Accept,
    Bridge,
    BridgeSettings,
    FormElicitation,
    InputHandlers,
    McpServerConfig,
    WaitMode,
)

PRINCIPAL = "conformance"
DEADLINE_S = 20


def _argument(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if kind in ("number", "integer"):
        return 1
    if kind == "boolean":
        return True
    return "x"


def arguments_for(schema: dict[str, Any], other_schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    required = schema.get("required") or list(properties)
    values = {name: _argument(properties.get(name) or {}) for name in required}
    if (properties.get("schema") or {}).get("type") == "object":
        values["schema"] = other_schema  # an echo of what was listed, kept verbatim
    numbers = [n for n in values if isinstance(values[n], int) and values[n] is not True]
    for value, name in enumerate(numbers, start=1):  # a, b -> 1, 2: the sum is checkable
        values[name] = value
    return values


async def accept_defaults(asked: FormElicitation) -> Accept:
    properties = (asked.requested_schema or {}).get("properties") or {}
    defaults = {k: v["default"] for k, v in properties.items() if "default" in v}
    return Accept(defaults)


async def main(url: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bridge-conformance-"))
    settings = BridgeSettings(
        ledger_url=str(folder / "ledger.db"),
        principals=[PRINCIPAL],
        mcp_servers=[McpServerConfig(name="suite", url=url)],
        input_handlers=InputHandlers(form=accept_defaults),
    )
    with anyio.fail_after(DEADLINE_S):
        async with Bridge.open(settings) as bridge:
            tools = await bridge.list_tools(PRINCIPAL, "suite")
            run = await bridge.register_served_run(
                PRINCIPAL,
                response_id="resp_" + secrets.token_hex(8),
                session_id="hsess" + secrets.token_hex(8),
                harness_id="chrn_conformance",
            )
            for name, arguments in planned_calls(tools):
                step = await run.call_tool("suite", name, arguments, wait=WaitMode.WAIT)
                print(name, step.kind.value)


def planned_calls(tools: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    named = context.get("toolCalls")
    if isinstance(named, list):
        return [(call["name"], dict(call.get("arguments") or {})) for call in named]
    calls = []
    for tool in tools:
        others = [t.input_schema for t in tools if t is not tool]
        calls.append((tool.name, arguments_for(tool.input_schema, others[0] if others else {})))
    return calls


if __name__ == "__main__":
    print("scenario:", os.environ.get("MCP_CONFORMANCE_SCENARIO"))
    anyio.run(main, sys.argv[-1])
