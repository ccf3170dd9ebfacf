import asyncio
import os

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode

URL = os.environ.get("BRIDGE_MCP_URL", "http://127.0.0.1:8701/mcp")  # bridge.testing.server
reports = McpServerConfig(name="reports", url=URL)
settings = BridgeSettings(ledger_url="first-task.db", principals=["acme"], mcp_servers=[reports])
# The call's own name: run the script again and the recorded call is replayed, never re-sent.
OPERATION = "first-task/report-Q3"


async def main() -> None:
    async with Bridge.open(settings) as bridge:
        run = await bridge.register_served_run(
            "acme", response_id="resp_1", session_id="hsess_1", harness_id="chrn_first"
        )
        earlier = await run.operation(OPERATION)  # reading it sends nothing
        print("first run: sending the call" if earlier is None else "rerun: nothing sent again")
        step = await run.call_tool(
            "reports",
            "generate_report",
            {"quarter": "Q3"},
            wait=WaitMode.WAIT,
            operation_id=OPERATION,
        )
        print(step.kind.value, "|", step.text().splitlines()[0])
        async for event in run.subscribe():  # the run's log, from its first event
            print(event.seq, event.type, getattr(event, "status", ""))
            if event.is_final:
                break


asyncio.run(main())
