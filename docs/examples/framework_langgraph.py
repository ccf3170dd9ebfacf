"""Framework guide (LangGraph): bridged MCP tools in a LangGraph agent, parked with
``interrupt()``, checkpointed beside the run — and found again by a "restarted" graph.

Needs BRIDGE_EXAMPLE_REPORTS_URL, BRIDGE_EXAMPLE_PAYMENTS_URL, BRIDGE_EXAMPLE_TOKEN and
BRIDGE_EXAMPLE_DB (the example MCP servers of harness_examples/mcp_servers). The model is a
scripted stand-in (no network): swap in any chat model that supports ``bind_tools``.
"""

# --8<-- [start:imports]
import os
import secrets
from typing import Any

import anyio
from langchain_core.messages import BaseMessage, ToolCall, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from bridge import Bridge, BridgeSettings, McpServerConfig, WaitMode
from bridge.integrations.langgraph import (
    ASKED_INPUT,
    BridgeCheckpointer,
    answer,
    bridge_interrupts,
    bridge_tools,
    graph_config,
    when_settled,
)
from bridge.testing.langgraph import ScriptedChatModel
# --8<-- [end:imports]

PAYMENT_KEY = "pay-" + secrets.token_hex(4)
SCRIPT = [  # what the stand-in model asks for, one tool call per turn
    ToolCall(name="generate_report", args={"quarter": "Q3", "sections": 2}, id="call-1"),
    ToolCall(
        name="approve_payment",
        args={"amount": 120, "currency": "EUR", "payee": "ACME Corp", "payment_key": PAYMENT_KEY},
        id="call-2",
    ),
]


async def build_graph(bridge: Bridge) -> Any:
    # --8<-- [start:graph]
    tools = [
        *await bridge_tools(bridge, "acme", "reports", wait=WaitMode.WAIT),  # blocks the node
        *await bridge_tools(bridge, "acme", "payments", wait=WaitMode.DETACH),  # parks
    ]
    model = ScriptedChatModel(script=SCRIPT).bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=BridgeCheckpointer(bridge, "acme"))
    # --8<-- [end:graph]
    return app


async def main() -> None:
    servers = [
        McpServerConfig(
            name=name,
            url=os.environ[f"BRIDGE_EXAMPLE_{name.upper()}_URL"],
            credential_ref="examples",
        )
        for name in ("reports", "payments")
    ]
    tokens = {"examples": os.environ["BRIDGE_EXAMPLE_TOKEN"]}
    async with Bridge.open(
        BridgeSettings(
            ledger_url=os.environ["BRIDGE_EXAMPLE_DB"],
            principals=["acme"],
            mcp_servers=servers,
            credentials=tokens.get,
        )
    ) as bridge:
        run = await bridge.register_served_run(
            "acme",
            response_id="resp_" + secrets.token_hex(8),
            session_id="hsess" + secrets.token_hex(8),
            harness_id="chrn_example",
        )
        app = await build_graph(bridge)
        # --8<-- [start:run]
        config = graph_config(run.ref)  # thread = the run; the tools read the run ref
        state = await app.ainvoke(
            {"messages": [("user", "report, then pay ACME")]}, config, durability="sync"
        )
        while interrupts := state.get("__interrupt__"):  # parked: a task, or a question
            questions = bridge_interrupts(interrupts, ASKED_INPUT)
            if questions:  # a human decides; the tool answers the typed InputRequest
                resume = Command(
                    resume={
                        interrupt_id: answer(asked, "accept", {"approve": True})
                        for interrupt_id, asked in questions.items()
                    }
                )
            else:  # parked tasks: resume when each settled (or lost) or asks for input
                resume = await when_settled(bridge, "acme", interrupts, timeout=60)
            state = await app.ainvoke(resume, config, durability="sync")
        print(state["messages"][-1].content)  # done: approved pay-…
        # --8<-- [end:run]
        assert state["messages"][-1].content == f"done: approved {PAYMENT_KEY}"
        report = next(m for m in state["messages"] if isinstance(m, ToolMessage))
        assert report.text.startswith("Quarterly report Q3"), report.text
        # --8<-- [start:restart]
        restarted = await build_graph(bridge)  # e.g. in a new process after a crash
        saved = await restarted.aget_state(config)  # read from the bridge ledger
        print(len(saved.values["messages"]), "messages, next:", saved.next)  # 6 … ()
        op = await run.operation(f"{run.ref}:call-2")  # operation id = run:call
        # --8<-- [end:restart]
        assert saved.next == () and len(saved.values["messages"]) == 6
        assert op is not None and op.task is not None and op.task.result is not None
        counted = await run.call_tool("payments", "payment_count", {"payment_key": PAYMENT_KEY})
        assert counted.text() == "1", counted.text()  # paid exactly once


if __name__ == "__main__":
    anyio.run(main)
