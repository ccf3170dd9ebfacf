"""A deterministic LangGraph agent for the integration tests: a scripted chat model (no
network) in a model → ToolNode loop over bridged tools, checkpointed in the bridge ledger."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Interrupt

from bridge import Bridge
from bridge.integrations.langgraph import (
    ASKED_INPUT,
    BridgeCheckpointer,
    answer,
    bridge_interrupts,
    when_settled,
)


class ScriptedChatModel(BaseChatModel):
    """Emits ``script[i]`` as its only tool call once ``i`` tool results are in the
    conversation, then a final answer quoting the last tool result."""

    script: list[ToolCall]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if len(results) < len(self.script):
            reply = AIMessage("", tool_calls=[self.script[len(results)]])
        else:
            reply = AIMessage(f"final: [{results[-1].status}] {results[-1].content}")
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools: Sequence[Any], **_: Any) -> ScriptedChatModel:
        return self


def call(name: str, call_id: str, **args: Any) -> ToolCall:
    return ToolCall(name=name, args=args, id=call_id, type="tool_call")


def agent_graph(
    bridge: Bridge,
    principal: str,
    tools: list[BaseTool],
    script: list[ToolCall],
    *,
    keep: int = 8,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    model = ScriptedChatModel(script=script).bind_tools(tools)

    async def think(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", think)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=BridgeCheckpointer(bridge, principal, keep=keep))


def pay(key: str, call_id: str = "call-pay") -> list[ToolCall]:
    """The script of an agent that makes one approved payment."""
    args = {"amount": 120, "currency": "EUR", "payee": "ACME Corp", "payment_key": key}
    return [call("approve_payment", call_id, **args)]


async def drive(
    bridge: Bridge,
    principal: str,
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    interrupts: Sequence[Interrupt],
) -> dict[str, Any]:
    """Resume a parked graph until it finishes: approve every question, wait out every task."""
    state: dict[str, Any] = {"__interrupt__": interrupts}
    while interrupts := state.get("__interrupt__", ()):
        questions = bridge_interrupts(interrupts, ASKED_INPUT)
        resume = (
            Command(
                resume={i: answer(q, "accept", {"approve": True}) for i, q in questions.items()}
            )
            if questions
            else await when_settled(bridge, principal, interrupts, timeout=30)
        )
        state = await graph.ainvoke(resume, config, durability="sync")
    return state
