"""A deterministic Agents SDK ``Model`` for tests and examples: no network, no API key.

Each turn is a function of the conversation it is given, not of a position in a script, so a
restarted process that resumes a saved run state gets the same answers: it calls the planned
tools in order (fixed call ids), one per turn, and once every call has an output it answers
with a final message quoting each tool's output (what the "model" read)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from agents import ModelResponse, ModelSettings, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool import Tool
from openai.types.responses.response_prompt_param import ResponsePromptParam


@dataclass(frozen=True)
class PlannedCall:
    call_id: str
    tool: str
    arguments: dict[str, Any]


def _text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return str(output.get("text", ""))
    if isinstance(output, list):
        return "".join(_text(part) for part in output)
    return str(output)


def tool_outputs(conversation: str | list[TResponseInputItem]) -> dict[str, str]:
    """call id -> the text the model was shown as that call's output."""
    if isinstance(conversation, str):
        return {}
    found: dict[str, str] = {}
    for item in conversation:
        data: Any = item
        if isinstance(data, dict) and data.get("type") == "function_call_output":
            found[str(data["call_id"])] = _text(data.get("output"))
    return found


class PlannedToolsModel(Model):
    """Calls ``plan`` in order, then says what each call returned."""

    def __init__(self, plan: Sequence[PlannedCall]) -> None:
        self.plan = list(plan)
        self.turns = 0

    def next_output(self, conversation: str | list[TResponseInputItem]) -> TResponseOutputItem:
        outputs = tool_outputs(conversation)
        for call in self.plan:
            if call.call_id not in outputs:
                return function_call(call.tool, call.arguments, call_id=call.call_id)
        read = "\n".join(f"{call.tool}: {outputs[call.call_id]}" for call in self.plan)
        return assistant_message(read)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        self.turns += 1
        return ModelResponse(output=[self.next_output(input)], usage=Usage(), response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        # The same turn as a stream: the SDK's own scripted model renders the events.
        self.turns += 1
        one_turn = ScriptedModel([ModelStep(output=[self.next_output(input)])])
        return one_turn.stream_response(
            system_instructions, input, model_settings, tools, output_schema, handoffs,
            tracing, previous_response_id=previous_response_id,
            conversation_id=conversation_id, prompt=prompt,
        )  # fmt: skip
