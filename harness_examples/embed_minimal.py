"""The smallest embedding of the bridge in a harness: one served run, one bridged tool call.

    python -m bridge.testing.server &          # an MCP task server on 127.0.0.1:8701
    python -m harness_examples.embed_minimal [--mcp-url http://127.0.0.1:8701/mcp] \
        [--tool generate_report] [--args '{"quarter": "Q3"}'] [--token T] [--db bridge-ledger.db]

It registers a response the harness serves (its own ``resp_…``/``hsess…`` ids), calls an MCP
tool through the bridge with the ``detach`` policy (``generate_report`` of
:mod:`bridge.testing.server`, or of ``harness_examples.mcp_servers.report_server``, answers with
a task), prints the run's events as they arrive until the task is settled, then reports the
outer response as completed. Run it twice against the same ``--db`` and the second run
recovers whatever the first left open. A server that needs a bearer token gets ``--token``
(or ``$BRIDGE_MCP_TOKEN``); a refused token, or none, is reported as such, naming the setting.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys

import anyio

from bridge import Bridge, BridgeSettings, McpServerConfig, OuterStatus, TaskPending, WaitMode
from bridge.errors import ServerConnectFailed

PRINCIPAL = "example-tenant"
TOKEN_ENV = "BRIDGE_MCP_TOKEN"
CREDENTIAL_REF = "mcp-token"  # the name the ledger may see; the token itself never


async def main_async(args: argparse.Namespace) -> None:
    servers = [
        McpServerConfig(
            name="tools",
            url=args.mcp_url,
            credential_ref=CREDENTIAL_REF if args.token else None,
        )
    ]
    tokens = {CREDENTIAL_REF: args.token}
    settings = BridgeSettings(
        ledger_url=args.db, principals=[PRINCIPAL], mcp_servers=servers, credentials=tokens.get
    )
    async with Bridge.open(settings) as bridge:
        recovery = bridge.last_recovery
        if recovery is not None and recovery.tasks_watched:
            print(f"recovered {recovery.tasks_watched} open task(s) from an earlier run")
        run = await bridge.register_served_run(
            PRINCIPAL,
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        step = await run.call_tool("tools", args.tool, json.loads(args.args), wait=WaitMode.DETACH)
        print(f"step: {type(step).__name__}")
        if isinstance(step, TaskPending):
            async for event in run.subscribe():
                print(f"  event {event.seq:>2} {event.type}")
                if event.is_final:  # task.terminal or task.lost
                    break
        await run.record_status(OuterStatus.COMPLETED)
        final = await run.view()
        print(f"run {run.ref}: outer {final.status}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--mcp-url",
        default="http://127.0.0.1:8701/mcp",
        help="Streamable HTTP URL of an MCP server (default: bridge.testing.server's)",
    )
    parser.add_argument("--tool", default="generate_report", help="default generate_report")
    parser.add_argument("--args", default='{"quarter": "Q3"}', help="tool arguments as JSON")
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV) or None,
        help=f"bearer token for the MCP server (default ${TOKEN_ENV}; none: no header)",
    )
    parser.add_argument("--db", default="bridge-ledger.db", help="ledger URL or SQLite path")
    try:
        anyio.run(main_async, parser.parse_args())
    except ServerConnectFailed as exc:  # says why (credentials, unreachable, TLS) and the fix
        sys.exit(f"embed_minimal: {exc}")


if __name__ == "__main__":
    main()
