"""A scripted LangChain chat model for the LangGraph guide (extra ``[langgraph]``): no LLM.

    from langchain_core.messages import ToolCall
    from bridge.testing.langgraph import ScriptedChatModel

    model = ScriptedChatModel(script=[ToolCall(name="generate_report", args={...}, id="c1")])

Each turn it asks for the next tool call of its script (one per turn, counted by the tool
results already in the conversation); once all were answered it replies
``done: <last tool result>``.
"""

from __future__ import annotations

from typing import Any

from bridge._extras import require_extra

require_extra("bridge.testing.langgraph", "langgraph")

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

__all__ = ["ScriptedChatModel"]


class ScriptedChatModel(BaseChatModel):
    """Calls ``script``'s tools in turn, then answers with the last tool result."""

    script: list[ToolCall]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        done = [m for m in messages if isinstance(m, ToolMessage)]
        reply = (
            AIMessage("", tool_calls=[self.script[len(done)]])
            if len(done) < len(self.script)
            else AIMessage(f"done: {done[-1].content if done else ''}")
        )
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools: Any, **_: Any) -> ScriptedChatModel:
        """The tools are the graph's to run: the script already names them."""
        return self
