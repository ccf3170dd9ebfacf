"""UHP <-> MCP Tasks bridge: the public API.

    async with Bridge.open("bridge-ledger.db", principals=["acme"], mcp_servers=[...]) as b:
        run = await b.register_served_run("acme", response_id=..., session_id=..., harness_id=...)
        step = await b.call_tool("acme", run.ref, "reports", "generate_report", {"quarter": "Q3"})
        async for event in b.subscribe("acme", run.ref, after_seq=0): ...

See docs/guides/embed-in-a-harness.md.
"""

from bridge.events import BridgeEvent
from bridge.facade import (
    Bridge,
    RecoveryReport,
    StepFailedRecoverably,
    StepOutcome,
    TaskPending,
    TaskSettled,
    UhpServerConfig,
)
from bridge.lifecycle import DispatchState, LostReason, OuterStatus, TaskStatus
from bridge.mcp.outcomes import InlineResult, RejectedCall, TaskHandle, UnknownOutcome
from bridge.mcp.requester import UnknownOutcomePolicy
from bridge.mcp.scheduler import SchedulerConfig
from bridge.mcp.servers import McpServerConfig
from bridge.policies import OnOuterCancel, OnOuterEnd, Policies, ToolPolicy, WaitMode
from bridge.replica import ReplicaConfig

__all__ = [
    "Bridge",
    "BridgeEvent",
    "DispatchState",
    "InlineResult",
    "LostReason",
    "McpServerConfig",
    "OnOuterCancel",
    "OnOuterEnd",
    "OuterStatus",
    "Policies",
    "RecoveryReport",
    "RejectedCall",
    "ReplicaConfig",
    "SchedulerConfig",
    "StepFailedRecoverably",
    "StepOutcome",
    "TaskHandle",
    "TaskPending",
    "TaskSettled",
    "TaskStatus",
    "ToolPolicy",
    "UhpServerConfig",
    "UnknownOutcome",
    "UnknownOutcomePolicy",
    "WaitMode",
]
