"""The smallest embedding of the bridge in a harness: one served run, one bridged tool call.

    python -m harness_examples.embed_minimal --mcp-url http://127.0.0.1:8701/mcp \
        --tool slow_report --args '{"quarter": "Q3"}' [--db bridge-ledger.db]

It registers a response the harness serves (its own ``resp_…``/``hsess…`` ids), calls an MCP
tool through the bridge with the ``detach`` policy, prints the run's events as they arrive
until the task is settled, then reports the outer response as completed. Run it twice against
the same ``--db`` and the second run recovers whatever the first left open.
"""

from __future__ import annotations

import argparse
import json
import secrets

import anyio

from bridge import Bridge, BridgeSettings, McpServerConfig, OuterStatus, TaskPending, WaitMode

PRINCIPAL = "example-tenant"


async def main_async(args: argparse.Namespace) -> None:
    servers = [McpServerConfig(name="tools", url=args.mcp_url)]
    async with Bridge.open(
        BridgeSettings(ledger_url=args.db, principals=[PRINCIPAL], mcp_servers=servers)
    ) as bridge:
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
    parser.add_argument("--mcp-url", required=True, help="Streamable HTTP URL of an MCP server")
    parser.add_argument("--tool", required=True)
    parser.add_argument("--args", default="{}", help="tool arguments as JSON")
    parser.add_argument("--db", default="bridge-ledger.db", help="ledger URL or SQLite path")
    anyio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
