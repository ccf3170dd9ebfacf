"""[openai-agents]: BridgedMCPServer lists the server's tools through the bridge (no run
context needed, only a principal)."""

import anyio
from common import done, settings

from bridge.integrations.openai_agents import BridgedMCPServer


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings()) as bridge:
        tools = await BridgedMCPServer(bridge, "reports", principal="acme").list_tools()
        assert {"generate_report", "echo"} <= {tool.name for tool in tools}, tools


anyio.run(main)
done("openai-agents")
