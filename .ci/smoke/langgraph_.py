"""[langgraph]: bridge_tools lists the server's tools through the bridge as LangChain tools;
the scripted chat model (bridge.testing) asks for one."""

import anyio
from common import done, settings
from langchain_core.messages import HumanMessage, ToolCall

from bridge import WaitMode
from bridge.integrations.langgraph import bridge_tools
from bridge.testing.langgraph import ScriptedChatModel


async def main() -> None:
    from bridge import Bridge

    async with Bridge.open(settings()) as bridge:
        tools = await bridge_tools(bridge, "acme", "reports", wait=WaitMode.WAIT)
        assert "generate_report" in {tool.name for tool in tools}, tools
    call = ToolCall(name="generate_report", args={"quarter": "Q3"}, id="c1")
    reply = ScriptedChatModel(script=[call]).invoke([HumanMessage("go")])
    assert reply.tool_calls[0]["name"] == "generate_report", reply


anyio.run(main)
done("langgraph")
