"""A scripted pydantic-ai model for the pydantic-ai guide (extra ``[pydantic-ai]``): no LLM.

from bridge.testing.pydantic_ai import scripted_model

agent = Agent(scripted_model("generate_report", {"quarter": "Q3"}), toolsets=[...])
"""

from __future__ import annotations

from typing import Any

from bridge._extras import require_extra

require_extra("bridge.testing.pydantic_ai", "pydantic-ai")

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = ["scripted_model"]


def scripted_model(tool: str, args: dict[str, Any]) -> FunctionModel:
    """A stand-in for an LLM: call ``tool`` with ``args`` once, then report what it returned."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(returns[0].model_response_str())])
        return ModelResponse(parts=[ToolCallPart(tool, args)])

    return FunctionModel(respond)
