"""``BridgedToolset``: a pydantic-ai toolset whose MCP tool calls go through the bridge.

Tools are listed through ``Bridge.list_tools`` (the bridge's own connection and credentials)
and every call through ``Run.call_tool`` with ``operation_id = "<run ref>:<tool call id>"``:
an agent step replayed after a restart finds its recorded operation and sends nothing again.

``mode="wait"`` blocks the tool call until its task settles (the bridge's ``ask`` wait: the
deadline pauses while the task waits for a person's input, which someone must answer
concurrently — ``BridgedRun(on_input=…)`` or your own subscriber). ``mode="detach"`` parks
the call with pydantic-ai's ``CallDeferred``: the run ends with ``DeferredToolRequests`` and
``BridgedRun`` resumes it with ``DeferredToolResults`` once the tasks settled."""

from __future__ import annotations

from typing import Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.exceptions import CallDeferred, ModelRetry, ToolFailed, UserError
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from bridge._facade import Bridge
from bridge._outcomes import InputPending
from bridge._policies import WaitMode
from bridge._runtime.step_results import TaskPending
from bridge.integrations.pydantic_ai._journal import CallEntry, RunJournal
from bridge.integrations.pydantic_ai._results import settled_value

# The server checks arguments against its own schema; pydantic-ai only needs a JSON object.
ARGUMENTS = SchemaValidator(
    core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema())
)

Mode = Literal["wait", "detach"]
_WAIT_MODES: dict[str, WaitMode] = {"wait": WaitMode.ASK, "detach": WaitMode.DETACH}


def operation_id(run_ref: str, tool_call_id: str) -> str:
    """The bridge operation id of one tool call of the agent (stable across replays)."""
    return f"{run_ref}:{tool_call_id}"


class BridgedToolset(AbstractToolset[Any]):
    """The tools of one MCP server, called through the bridge inside the outer run ``run``.

    ``principal`` scopes every call (it must be one of the bridge's principals); ``run`` is
    the run ref (``Bridge.register_served_run(...).ref``). ``wait_deadline_s`` overrides the
    tool policy's deadline for ``wait``. ``max_retries``: how often the model may correct a
    call the server refused.
    """

    def __init__(
        self,
        bridge: Bridge,
        principal: str,
        server: str,
        *,
        run: str,
        mode: Mode = "wait",
        wait_deadline_s: float | None = None,
        max_retries: int = 1,
        id: str | None = None,
    ) -> None:
        if mode not in _WAIT_MODES:
            raise UserError(f"mode must be 'wait' or 'detach', not {mode!r}")
        self.bridge = bridge
        self.principal = principal
        self.server = server
        self.run_ref = run
        self.mode: Mode = mode
        self.wait_deadline_s = wait_deadline_s
        self.max_retries = max_retries
        self.journal = RunJournal(bridge, principal, run)
        self._id = id or f"bridge:{server}"
        self._tools: dict[str, ToolDefinition] | None = None

    @property
    def id(self) -> str:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        if self._tools is None:  # a server's tools do not change within a run
            listed = await self.bridge.list_tools(self.principal, self.server)
            self._tools = {
                tool.name: ToolDefinition(
                    name=tool.name,
                    description=tool.description,
                    parameters_json_schema=tool.input_schema,
                    metadata={
                        "server": self.server,
                        "annotations": tool.annotations.model_dump(by_alias=True)
                        if tool.annotations
                        else None,
                    },
                )
                for tool in listed
            }
        return {name: self._tool(d) for name, d in self._tools.items()}

    async def get_tool_for_tool_def(
        self, tool_def: ToolDefinition, ctx: RunContext[Any]
    ) -> ToolsetTool[Any]:
        return self._tool(tool_def)  # fully described by its definition: nothing to list

    def _tool(self, tool_def: ToolDefinition) -> ToolsetTool[Any]:
        return ToolsetTool(
            toolset=self, tool_def=tool_def, max_retries=self.max_retries, args_validator=ARGUMENTS
        )

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if ctx.tool_call_id is None:
            raise UserError("a bridged tool call needs the tool call id (its operation id)")
        op_id = operation_id(self.run_ref, ctx.tool_call_id)
        entry = CallEntry(server=self.server, tool=name, operation_id=op_id, task_ref=None)
        await self.journal.record_call(ctx.messages, ctx.tool_call_id, entry)  # write-ahead
        step = await self.bridge.run(self.principal, self.run_ref).call_tool(
            self.server,
            name,
            tool_args,
            operation_id=op_id,
            wait=_WAIT_MODES[self.mode],
            wait_deadline_s=self.wait_deadline_s,
        )
        task = getattr(step, "task", None)
        if task is not None:
            await self.journal.record_task(ctx.tool_call_id, task.ref)
        if isinstance(step, TaskPending | InputPending):
            raise CallDeferred(deferral_metadata(self.server, name, op_id, step), kind=_kind(step))
        value = settled_value(step)
        if isinstance(value, ToolFailed | ModelRetry):
            raise value
        return value


def deferral_metadata(
    server: str, tool: str, op_id: str, step: TaskPending | InputPending
) -> dict[str, Any]:
    """What a parked call carries in ``DeferredToolRequests.metadata`` (bridge references and
    the server's question, never a raw task id)."""
    parked: dict[str, Any] = {"server": server, "tool": tool, "operation_id": op_id}
    if isinstance(step, TaskPending):
        parked["task_ref"] = step.task.ref
    else:
        parked["inputs"] = [
            {
                "input_ref": request.input_ref,
                "method": request.method,
                "message": request.message,
                "requested_schema": request.requested_schema,
            }
            for request in step.inputs
        ]
    return {"bridge": parked}


def _kind(step: TaskPending | InputPending) -> Literal["external", "question"]:
    # A call the server asked about before doing anything waits for a person's answer.
    return "question" if isinstance(step, InputPending) else "external"
