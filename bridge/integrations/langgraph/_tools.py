"""LangChain tools that list through :meth:`Bridge.list_tools` and call through
:meth:`Run.call_tool`, parking with LangGraph ``interrupt()`` where the call cannot finish
inside the turn (a detached task, a question from the server)."""

from __future__ import annotations

from collections.abc import Collection
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import interrupt

from bridge._errors import AnswerRefused, InvalidAnswer
from bridge._outcomes import CallOutcome, InputPending, InputRequest, elicit
from bridge._policies import WaitMode
from bridge._runtime.step_results import TaskPending
from bridge.integrations.langgraph._payloads import (
    BridgeInterrupt,
    asked_input,
    parked_task,
    tool_message,
)

if TYPE_CHECKING:
    import mcp_types

    from bridge._facade import Bridge

RUN_REF_KEY = "bridge_run_ref"  # in the graph config's ``configurable``
current_run_ref: ContextVar[str | None] = ContextVar("bridge_langgraph_run_ref", default=None)


def graph_config(run_ref: str, thread_id: str | None = None) -> RunnableConfig:
    """The config to invoke a graph with for one bridge run: its thread (the run ref unless
    you name one) and the run ref the bridged tools and the checkpointer read."""
    return {"configurable": {"thread_id": thread_id or run_ref, RUN_REF_KEY: run_ref}}


def run_ref_of(config: RunnableConfig | None) -> str:
    """The bridge run a graph step belongs to: ``configurable[RUN_REF_KEY]``, else
    :data:`current_run_ref`."""
    configured = ((config or {}).get("configurable") or {}).get(RUN_REF_KEY)
    run_ref = configured or current_run_ref.get()
    if not isinstance(run_ref, str) or not run_ref:
        raise ValueError(
            f"no bridge run for this graph step: invoke with graph_config(run_ref) "
            f"(configurable[{RUN_REF_KEY!r}]) or set current_run_ref"
        )
    return run_ref


async def bridge_tools(
    bridge: Bridge,
    principal: str,
    server: str,
    *,
    wait: WaitMode | None = None,
    only: Collection[str] | None = None,
) -> list[BaseTool]:
    """The server's tools (listed through the bridge, with its credentials) as LangChain
    tools for a LangGraph ``ToolNode``. ``wait`` overrides the bridge policy's mode for every
    call: ``WAIT`` blocks the tool node; ``DETACH`` parks with ``interrupt()``."""
    listed = await bridge.list_tools(principal, server)
    return [
        bridged_tool(bridge, principal, server, tool, wait=wait)
        for tool in listed
        if only is None or tool.name in only
    ]


def bridged_tool(
    bridge: Bridge,
    principal: str,
    server: str,
    tool: mcp_types.Tool,
    *,
    wait: WaitMode | None = None,
) -> StructuredTool:
    """One MCP tool as a LangChain tool whose schema is the server's own input schema."""
    call = _BridgedCall(bridge, principal, server, tool.name, wait)

    async def run(runtime: ToolRuntime, **arguments: Any) -> ToolMessage:
        return await call(runtime, arguments)

    return StructuredTool(
        name=tool.name,
        description=tool.description or tool.name,
        args_schema=tool.input_schema,
        coroutine=run,
    )


class _BridgedCall:
    """One tool's call loop. Every pass asks the bridge again with the same operation id (a
    replay sends nothing), so the node may be re-run from the top after any resume or
    restart: each ``interrupt()`` answer is only a hint to look again, or an answer bound to
    one input ref that is applied while that input is still pending."""

    def __init__(
        self, bridge: Bridge, principal: str, server: str, tool: str, wait: WaitMode | None
    ) -> None:
        self.bridge = bridge
        self.principal = principal
        self.server = server
        self.tool = tool
        self.wait = wait

    async def __call__(self, runtime: ToolRuntime, arguments: dict[str, Any]) -> ToolMessage:
        run_ref = run_ref_of(runtime.config)
        if not runtime.tool_call_id:
            raise ValueError(f"{self.tool}: invoked without a tool call id (use a ToolNode)")
        base = {
            "run_ref": run_ref,
            "tool_call_id": runtime.tool_call_id,
            "server": self.server,
            "tool": self.tool,
            "operation_id": f"{run_ref}:{runtime.tool_call_id}",
        }
        note: str | None = None
        while True:
            outcome = await self.bridge.run(self.principal, run_ref).call_tool(
                self.server,
                self.tool,
                arguments,
                operation_id=base["operation_id"],
                wait=self.wait,
            )
            payload = await self._parking(outcome, base, note)
            if payload is None:
                return tool_message(outcome, runtime.tool_call_id, self.tool)
            note = await self._take(interrupt(payload), run_ref)

    async def _parking(
        self, outcome: CallOutcome, base: dict[str, str], note: str | None
    ) -> BridgeInterrupt | None:
        """What the graph must wait for, or ``None`` when the outcome is the tool's result."""
        if isinstance(outcome, InputPending):
            asking = await self._pending(base["run_ref"], lambda r: r.op_ref == outcome.op_ref)
        elif isinstance(outcome, TaskPending):
            asking = await self._pending(base["run_ref"], lambda r: r.task_ref == outcome.task.ref)
            if not asking:
                return parked_task(base, outcome.task.ref)
        else:
            return None
        # An MRTR call whose inputs are all answered but not yet re-sent (queued: the server
        # was unreachable) has nothing to ask: the model is told it waits for input.
        return asked_input(base, asking[0], note) if asking else None

    async def _pending(self, run_ref: str, mine: Any) -> list[InputRequest]:
        return [
            r for r in await self.bridge.run(self.principal, run_ref).pending_inputs() if mine(r)
        ]

    async def _take(self, resumed: object, run_ref: str) -> str | None:
        """Apply a resume value that answers an input still pending; a note when refused."""
        if not (isinstance(resumed, dict) and resumed.get("kind") == "bridge.answer"):
            return None
        wanted = resumed.get("input_ref")
        matching = await self._pending(run_ref, lambda r: r.input_ref == wanted)
        if not matching:  # answered already: by the host, or before a replay
            return None
        request = matching[0]
        try:
            await elicit(request, resumed.get("action"), content=resumed.get("content"))
        except InvalidAnswer as refused:  # checked before anything was recorded
            return f"answer not taken: {refused.detail}"
        except AnswerRefused as refused:  # recorded, not delivered: the server said no
            return f"the server refused the answer: {refused.reason}"
        return None
