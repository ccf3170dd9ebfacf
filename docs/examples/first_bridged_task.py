import asyncio
import os

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode

URL = os.environ.get("BRIDGE_MCP_URL", "http://127.0.0.1:8701/mcp")  # bridge.testing.server
reports = McpServerConfig(name="reports", url=URL)
settings = BridgeSettings(ledger_url="first-task.db", principals=["acme"], mcp_servers=[reports])


async def main() -> None:
    async with Bridge.open(settings) as bridge:
        run = await bridge.register_served_run(
            "acme", response_id="resp_1", session_id="hsess_1", harness_id="chrn_first"
        )
        step = await run.call_tool(
            "reports", "generate_report", {"quarter": "Q3"}, wait=WaitMode.WAIT
        )
        print(step.kind.value, "|", step.text().splitlines()[0])
        async for event in run.subscribe():  # the run's log, from its first event
            print(event.seq, event.type, getattr(event, "status", ""))
            if event.is_final:
                break


asyncio.run(main())
