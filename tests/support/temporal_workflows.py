"""Workflows the Temporal integration's tests and benchmark run (and the worker driver hosts)."""

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from bridge.integrations.temporal import CallOptions, OnWorkflowCancel, ToolOutcome, call_tool

TASK_QUEUE = "bridge-tests"


@dataclass(frozen=True)
class CallSpec:
    server: str
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    on_cancel: OnWorkflowCancel = OnWorkflowCancel.LEAVE
    heartbeat_timeout_s: float = 10.0
    start_timeout_s: float = 60.0
    task_queue: str | None = None  # where the bridge's activities run, when not beside


@workflow.defn
class BridgedCallWorkflow:
    """One bridged call; returns its outcome."""

    @workflow.run
    async def run(self, spec: CallSpec) -> ToolOutcome:
        return await call_tool(
            spec.server,
            spec.tool,
            spec.arguments,
            on_cancel=spec.on_cancel,
            options=CallOptions(
                heartbeat_timeout_s=spec.heartbeat_timeout_s,
                start_timeout_s=spec.start_timeout_s,
                task_queue=spec.task_queue,
            ),
        )


@workflow.defn
class TwoCallsWorkflow:
    """Two bridged calls in a row (the replay test changes nothing else)."""

    @workflow.run
    async def run(self, spec: CallSpec) -> list[ToolOutcome]:
        first = await call_tool(spec.server, spec.tool, spec.arguments)
        second = await call_tool(spec.server, spec.tool, spec.arguments)
        return [first, second]


@workflow.defn(name="TwoCallsWorkflow")
class TwoCallsChangedWorkflow:
    """The same workflow type with a timer added between its calls: not replay-compatible."""

    @workflow.run
    async def run(self, spec: CallSpec) -> list[ToolOutcome]:
        first = await call_tool(spec.server, spec.tool, spec.arguments)
        await workflow.sleep(timedelta(seconds=1))
        second = await call_tool(spec.server, spec.tool, spec.arguments)
        return [first, second]


@dataclass(frozen=True)
class RawCall:
    key: str
    seconds: float


@workflow.defn
class BridgedTextWorkflow:
    """The bench task tool's ``work`` call, bridged, returning the tool's text: the same input
    and output as :class:`RawCallWorkflow` (the benchmark compares the two)."""

    @workflow.run
    async def run(self, call: RawCall) -> str:
        outcome = await call_tool("tasks", "work", {"key": call.key, "seconds": call.seconds})
        if not outcome.succeeded or outcome.text is None:
            raise ApplicationError(f"the call ended {outcome.kind}", non_retryable=True)
        return outcome.text


@workflow.defn
class RawCallWorkflow:
    """The MCP call as one plain activity (``bench/temporal.py``'s ``raw_task_call``), returning
    the tool's text."""

    @workflow.run
    async def run(self, call: RawCall) -> str:
        text: str = await workflow.execute_activity(
            "raw_task_call", call, result_type=str, start_to_close_timeout=timedelta(seconds=120)
        )
        return text


@workflow.defn
class RawCallAfterEmptyLocalActivityWorkflow:
    """:class:`RawCallWorkflow` with one empty local activity first: the plain call with the
    activities a bridged call runs (``call_tool`` starts with a local activity), i.e. what the
    extra local activity and the workflow task after it cost a worker on their own, for
    ``bench/temporal.py``."""

    @workflow.run
    async def run(self, call: RawCall) -> str:
        await workflow.execute_local_activity(
            "empty_activity",
            call.key,
            result_type=str,
            start_to_close_timeout=timedelta(seconds=60),
        )
        text: str = await workflow.execute_activity(
            "raw_task_call", call, result_type=str, start_to_close_timeout=timedelta(seconds=120)
        )
        return text
