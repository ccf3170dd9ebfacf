"""``BridgedMCPServer``: an Agents SDK ``MCPServer`` whose tools run through a :class:`Bridge`.

The SDK sees an ordinary MCP server: ``list_tools`` lists through the bridge's own connection
and credentials, ``call_tool`` calls through ``Run.call_tool`` with
``operation_id = f"{run_ref}:{tool_call_id}"`` (a replayed step never calls twice).

Parking a call uses the SDK's one pause point, the per-call ``needs_approval`` check, which runs
before the tool is invoked. For a bridged tool it *dispatches* the call (detached: the handle is
durable at once) and answers "needs approval" — an interruption in ``result.interruptions`` —
when the task asks the human something (``approvals=True``) or, in ``detach`` mode, while it
is still working. Otherwise it lets the SDK invoke the tool, and ``call_tool`` replays the same
operation with the step's wait mode. :mod:`._parking` resumes parked calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
from agents.exceptions import UserError
from agents.mcp import MCPServer
from agents.mcp.util import MCPToolMetaContext
from agents.run_context import RunContextWrapper
from agents.tool_context import ToolContext

from bridge._facade import Bridge
from bridge._mcp.wire.tool_result import error_result
from bridge._outcomes import CallOutcome, InlineResult, InputPending, RejectedCall, UnknownOutcome
from bridge._policies import WaitMode
from bridge._runtime.step_results import RecoverableFailure, TaskPending, TaskSettled
from bridge.integrations.openai_agents._run import (
    BridgedRun,
    current_run,
    current_run_if_any,
    operation_id,
)
from bridge.integrations.openai_agents._watch import Turn, settles_or_asks

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agents.agent import AgentBase

# The SDK hands ``call_tool`` no tool call id; our meta resolver passes it in ``meta`` under
# this key, and ``call_tool`` takes it out again (``_meta`` is not forwarded to the server).
CALL_ID_META_KEY = "uhp-mcp-bridge/tool-call-id"


def _call_id_meta(context: MCPToolMetaContext) -> dict[str, Any] | None:
    run_context = context.run_context
    if isinstance(run_context, ToolContext):
        return {CALL_ID_META_KEY: run_context.tool_call_id}
    return None


class BridgedMCPServer(MCPServer):
    """One configured MCP server of ``bridge`` (``server``: its ``McpServerConfig.name``), as
    an Agents SDK server: ``Agent(mcp_servers=[BridgedMCPServer(bridge, "payments")])``.

    ``wait``: the step's wait mode (``None``: the bridge's policy for the tool). ``detach``
    parks a call whose task is still working as an interruption; the others block the turn.
    ``approvals``: a task that asks for input parks as an interruption, answered through the
    typed ``InputRequest`` (:func:`~._parking.parked_calls`); ``False`` keeps the turn blocked
    while something else answers (a concurrent subscriber or ``InputHandlers``).
    ``principal``: used when the run context (:func:`~._run.bridged_run`) names none.
    """

    def __init__(
        self,
        bridge: Bridge,
        server: str,
        *,
        wait: WaitMode | None = None,
        approvals: bool = True,
        principal: str | None = None,
        use_structured_content: bool = False,
    ) -> None:
        super().__init__(
            use_structured_content=use_structured_content, tool_meta_resolver=_call_id_meta
        )
        self.bridge = bridge
        self.server = server
        self.wait = wait
        self.approvals = approvals
        self.principal = principal
        self._tools: list[mcp_types.Tool] | None = None
        self._wait_spent: set[str] = set()  # operations whose wait budget the check used

    @property
    def name(self) -> str:
        return self.server

    async def connect(self) -> None:
        """Nothing to open: the bridge owns the connection (and its credentials)."""

    async def cleanup(self) -> None:
        """Nothing to close: the bridge's connection outlives the agent."""

    @property
    def cached_tools(self) -> list[mcp_types.Tool] | None:
        return None if self._tools is None else list(self._tools)

    def _principal(self, run: BridgedRun | None) -> str:
        principal = (run.principal if run is not None else None) or self.principal
        if principal is None:
            raise UserError(
                "no principal: pass BridgedMCPServer(..., principal=) "
                "or bridged_run(..., principal=)"
            )
        return principal

    def _mode(self, tool: str) -> WaitMode:
        return self.wait or self.bridge.policies.for_tool(self.server, tool).wait

    async def list_tools(
        self,
        run_context: RunContextWrapper[Any] | None = None,
        agent: AgentBase | None = None,
    ) -> list[mcp_types.Tool]:
        """The server's tools through the bridge. Listing needs a principal, not a run: outside
        ``bridged_run`` the server's own ``principal`` is used (no run context needed)."""
        self._tools = await self.bridge.list_tools(
            self._principal(current_run_if_any()), self.server
        )
        return list(self._tools)

    def _get_needs_approval_for_tool(
        self, tool: mcp_types.Tool, agent: AgentBase | None
    ) -> bool | Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
        """The SDK's pre-invocation check (``FunctionTool.needs_approval``) for one tool."""
        if not self.approvals and self._mode(tool.name) is not WaitMode.DETACH:
            return False  # nothing ever parks: ``call_tool`` does the whole step

        async def parks(_: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str) -> bool:
            return await self._dispatch_and_park(tool.name, arguments, call_id)

        return parks

    async def _dispatch_and_park(self, tool: str, arguments: dict[str, Any], call_id: str) -> bool:
        """Send the call (detached) and say whether it parks: asks the human (``approvals``)
        or, in ``detach`` mode, is still working. Otherwise, in a waiting mode, wait here
        (until it settles, asks, or the wait deadline passes) and let the SDK invoke it."""
        run = current_run()
        principal = self._principal(run)
        op_id = operation_id(run.run_ref, call_id)
        step = await self.bridge.run(principal, run.run_ref).call_tool(
            self.server, tool, arguments, operation_id=op_id, wait=WaitMode.DETACH
        )
        if isinstance(step, InputPending):
            return self.approvals
        if not isinstance(step, TaskPending):
            return False  # inline, refused, unknown or already settled: read in call_tool
        mode = self._mode(tool)
        if mode is WaitMode.DETACH:
            return True
        if not self.approvals or mode is WaitMode.FAIL_RECOVERABLE:
            return False
        deadline = self.bridge.policies.for_tool(self.server, tool).wait_deadline_s
        turn: Turn | None = None
        with anyio.move_on_after(None if mode is WaitMode.ASK else deadline):
            turn = await settles_or_asks(self.bridge, principal, run.run_ref, step.task.ref)
        if turn is None:
            self._wait_spent.add(op_id)  # ``call_tool`` reports it without waiting again
        return turn is Turn.ASKS

    async def call_tool(
        self,
        tool_name: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None = None,
    ) -> mcp_types.CallToolResult:
        call_id = (meta or {}).get(CALL_ID_META_KEY)
        if not isinstance(call_id, str):
            raise UserError("BridgedMCPServer.call_tool needs the SDK's tool call (no call id)")
        run = current_run()
        op_id = operation_id(run.run_ref, call_id)
        bridged = self.bridge.run(self._principal(run), run.run_ref)
        step = await bridged.call_tool(
            self.server,
            tool_name,
            arguments,
            operation_id=op_id,
            wait=self._mode(tool_name),
            wait_deadline_s=0 if op_id in self._wait_spent else None,
        )
        self._wait_spent.discard(op_id)
        return model_visible_result(step)

    async def list_prompts(self) -> mcp_types.ListPromptsResult:
        return mcp_types.ListPromptsResult(prompts=[])  # the bridge routes tools only

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None
    ) -> mcp_types.GetPromptResult:
        raise UserError(f"{self.server}: prompts are not routed through the bridge ({name!r})")


def model_visible_result(step: CallOutcome) -> mcp_types.CallToolResult:
    """What the model reads for a step: the tool result, or an ``isError`` result saying
    plainly why there is none (a lost task is reported as lost, never as a success)."""
    if isinstance(step, InlineResult | TaskSettled):
        return step.to_call_tool_result()
    if isinstance(step, TaskPending):
        return error_result("the task is still running (detached); its result comes later")
    if isinstance(step, RecoverableFailure):
        return error_result(f"no result yet: {step.reason}; the task is still watched")
    if isinstance(step, RejectedCall):
        message = step.error.get("message") if isinstance(step.error, dict) else None
        return error_result(f"the server refused the call ({step.code}): {message}")
    if isinstance(step, UnknownOutcome):
        return error_result(f"the call's outcome is unknown ({step.reason}); not retried")
    if isinstance(step, InputPending):
        return error_result("the call is waiting for the user's input")
    return error_result("the call became a task that is still open")  # a bare TaskHandle
