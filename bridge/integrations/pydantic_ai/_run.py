"""``BridgedRun``: drive a pydantic-ai agent run over a bridged run ref to its final output —
resuming parked (detached) tool calls with ``DeferredToolResults`` once their tasks settle,
offering input requests to the host as they come, and restarting from the saved state after
a crash."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from bridge import events as ev
from bridge._errors import BridgeError
from bridge._outcomes import InputRequest
from bridge._policies import WaitMode
from bridge.integrations.pydantic_ai._journal import RunJournal
from bridge.integrations.pydantic_ai._results import settled_value
from bridge.integrations.pydantic_ai._toolset import BridgedToolset

# The host's answer to one input request (typically ``await request.accept({...})`` after
# asking a person, or ``request.decline()``).
InputAnswerer = Callable[[InputRequest], Awaitable[object]]


class BridgedRun:
    """One agent run inside one outer run (the ``toolset``'s principal and run ref).

    ``run(prompt)`` starts it, or — when state was saved beside the run — resumes it from that
    state (after a restart), and returns the final ``AgentRunResult``. The agent's
    ``output_type`` must admit ``DeferredToolRequests`` when a toolset detaches.
    ``on_input``: called once for each input request of the run (a task asking for approval)
    while the run is driven; without it, answer them elsewhere (``Bridge.pending_inputs``).
    ``settle_timeout_s``: how long one parked call is waited for (None: the tool policy's
    deadline); past it the model is told the task is still running.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        toolset: BridgedToolset,
        *,
        on_input: InputAnswerer | None = None,
        settle_timeout_s: float | None = None,
        deps: Any = None,
    ) -> None:
        self.agent = agent
        self.toolset = toolset
        self.bridge = toolset.bridge
        self.principal = toolset.principal
        self.run_ref = toolset.run_ref
        self.journal = RunJournal(self.bridge, self.principal, self.run_ref)
        self.on_input = on_input
        self.settle_timeout_s = settle_timeout_s
        self.deps = deps

    async def run(self, user_prompt: str | None = None) -> AgentRunResult[Any]:
        async with anyio.create_task_group() as inputs:
            if self.on_input is not None:
                inputs.start_soon(self._offer_inputs, self.on_input)
            try:
                result = await self._drive(user_prompt)
            finally:
                inputs.cancel_scope.cancel()
        return result

    async def _drive(self, user_prompt: str | None) -> AgentRunResult[Any]:
        saved = await self.journal.load()
        if saved is not None and saved.finished:
            raise BridgeError(f"the agent run of {self.run_ref} already finished")
        history = saved.messages if saved is not None and saved.messages else None
        prompt = None if history is not None else user_prompt  # a resumed run has its prompt
        results: DeferredToolResults | None = None
        while True:
            result = await self.agent.run(
                prompt, message_history=history, deferred_tool_results=results, deps=self.deps
            )
            parked = isinstance(result.output, DeferredToolRequests)
            history = result.all_messages()
            await self.journal.record_history(history, finished=not parked)
            if not isinstance(result.output, DeferredToolRequests):
                return result
            prompt = None
            results = await self.settle(result.output)

    async def settle(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """Wait until every call the bridge parked has settled (a lost task counts as settled
        and is reported to the model as lost), then their results for the next agent run."""
        results = DeferredToolResults()

        async def settle_one(call: ToolCallPart, parked: dict[str, Any]) -> None:
            # A replay of the recorded operation (nothing is sent again), waited for like
            # ``wait`` mode: until terminal or lost, the deadline paused during input.
            step = await self.bridge.run(self.principal, self.run_ref).call_tool(
                parked["server"],
                parked["tool"],
                call.args_as_dict(),
                operation_id=parked["operation_id"],
                wait=WaitMode.ASK,
                wait_deadline_s=self.settle_timeout_s,
            )
            results.calls[call.tool_call_id] = settled_value(step)

        async with anyio.create_task_group() as group:
            for call in requests.calls:
                parked = requests.metadata.get(call.tool_call_id, {}).get("bridge")
                if parked is None:
                    raise BridgeError(
                        f"deferred call {call.tool_call_id} was not parked by the bridge"
                    )
                group.start_soon(settle_one, call, parked)
        return results

    async def _offer_inputs(self, answer: InputAnswerer) -> None:
        offered: set[str] = set()
        async for event in self.bridge.run(self.principal, self.run_ref).subscribe():
            if not isinstance(event, ev.InputRequiredEvent):
                continue
            # Only still-unanswered requests (replaying the run's events after a restart
            # must not offer what was answered before the crash).
            for request in await self.bridge.run(self.principal, self.run_ref).pending_inputs():
                if request.input_ref not in offered:
                    offered.add(request.input_ref)
                    await answer(request)
