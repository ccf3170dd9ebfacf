"""On-call guide: what waits for a person, then act on it (docs/guides/on-call.md).

Run against the package's example task server (``python -m bridge.testing.server``):
BRIDGE_MCP_URL, and BRIDGE_EXAMPLE_DB for the ledger (default ``on-call.db``).
"""

import asyncio
import os

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode

URL = os.environ.get("BRIDGE_MCP_URL", "http://127.0.0.1:8701/mcp")  # bridge.testing.server
DB = os.environ.get("BRIDGE_EXAMPLE_DB", "on-call.db")
payments = McpServerConfig(name="payments", url=URL)
settings = BridgeSettings(ledger_url=DB, principals=["acme"], mcp_servers=[payments])


async def main() -> None:
    async with Bridge.open(settings) as bridge:
        run = await bridge.register_served_run(
            "acme", response_id="resp_oncall", session_id="hsess_oncall", harness_id="chrn_oncall"
        )
        # A payment that waits for a person's yes (the server asks before it pays).
        await run.call_tool(
            "payments",
            "approve_payment",
            {"amount": 120, "payee": "ACME GmbH"},
            wait=WaitMode.DETACH,
            operation_id="on-call/pay-120",
        )
        async for event in run.subscribe():  # until the server's question is recorded
            if event.type == "task.input_required":
                break

        # 1. See: everything that waits for a person, oldest first, each with its next step.
        items = await bridge.attention()
        for item in items:
            print(item.kind, "|", item.question, "| fields:", ", ".join(item.fields))
        asked = items[0]

        # 2. Act: answer it (checked against its schema before anything is recorded or sent).
        request = await run.pending_input(asked.task_ref or "", asked.ref)
        receipt = await request.accept(texts={"approve": "yes"})
        print("answer", receipt.delivery.value)
        (task,) = await run.wait_for([asked.task_ref or ""], timeout=30)
        print(task.status.value, "|", task.result["content"][0]["text"])

        # 3. It left the list.
        print("still waiting:", len(await bridge.attention()))


asyncio.run(main())
