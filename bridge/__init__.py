"""UHP <-> MCP Tasks bridge: the public API.

    settings = BridgeSettings(ledger_url="bridge-ledger.db", principals=["acme"], mcp_servers=[...])
    async with Bridge.open(settings) as b:
        run = await b.register_served_run("acme", response_id=..., session_id=..., harness_id=...)
        step = await run.call_tool("reports", "generate_report", {"quarter": "Q3"})
        async for event in run.subscribe(after_seq=0): ...

Every public name is importable from here. They load on first use (PEP 562): ``import bridge``
itself loads neither SQLAlchemy, the MCP SDK, httpx nor OpenTelemetry.
See docs/guides/embed-in-a-harness.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.errors import (
        AgentStateTooLarge as AgentStateTooLarge,
    )
    from bridge.errors import (
        AnswerRefused as AnswerRefused,
    )
    from bridge.errors import (
        BridgeError as BridgeError,
    )
    from bridge.errors import (
        ConflictingIds as ConflictingIds,
    )
    from bridge.errors import (
        DuplicateTaskHandle as DuplicateTaskHandle,
    )
    from bridge.errors import (
        InputAlreadyAnswered as InputAlreadyAnswered,
    )
    from bridge.errors import (
        InvalidInputAnswer as InvalidInputAnswer,
    )
    from bridge.errors import (
        InvalidTaskResponse as InvalidTaskResponse,
    )
    from bridge.errors import (
        InvalidTransition as InvalidTransition,
    )
    from bridge.errors import (
        LeaseLost as LeaseLost,
    )
    from bridge.errors import (
        LedgerError as LedgerError,
    )
    from bridge.errors import (
        LedgerUnavailable as LedgerUnavailable,
    )
    from bridge.errors import (
        MalformedTaskHandle as MalformedTaskHandle,
    )
    from bridge.errors import (
        McpSideError as McpSideError,
    )
    from bridge.errors import (
        NotFound as NotFound,
    )
    from bridge.errors import (
        NoToolResult as NoToolResult,
    )
    from bridge.errors import (
        OperationReused as OperationReused,
    )
    from bridge.errors import (
        ServerConnectFailed as ServerConnectFailed,
    )
    from bridge.errors import (
        TaskRequestFailed as TaskRequestFailed,
    )
    from bridge.errors import (
        UnknownInputKey as UnknownInputKey,
    )
    from bridge.errors import (
        UnknownServer as UnknownServer,
    )
    from bridge.errors import (
        WaitTimedOut as WaitTimedOut,
    )
    from bridge.events import (
        FINAL_TASK_EVENTS as FINAL_TASK_EVENTS,
    )
    from bridge.events import (
        Anomaly as Anomaly,
    )
    from bridge.events import (
        BridgeEvent as BridgeEvent,
    )
    from bridge.events import (
        CallAdmissionChecked as CallAdmissionChecked,
    )
    from bridge.events import (
        CallInputAnswered as CallInputAnswered,
    )
    from bridge.events import (
        CallInputDeclined as CallInputDeclined,
    )
    from bridge.events import (
        CallInputHandlerFailed as CallInputHandlerFailed,
    )
    from bridge.events import (
        CallInputRequired as CallInputRequired,
    )
    from bridge.events import (
        CallResult as CallResult,
    )
    from bridge.events import (
        CallUnknownOutcome as CallUnknownOutcome,
    )
    from bridge.events import (
        OuterFieldsIgnored as OuterFieldsIgnored,
    )
    from bridge.events import (
        OuterIdsRecorded as OuterIdsRecorded,
    )
    from bridge.events import (
        OuterOpenTasks as OuterOpenTasks,
    )
    from bridge.events import (
        OuterResumed as OuterResumed,
    )
    from bridge.events import (
        OuterStatusChanged as OuterStatusChanged,
    )
    from bridge.events import (
        OuterStreamLost as OuterStreamLost,
    )
    from bridge.events import (
        OuterTerminal as OuterTerminal,
    )
    from bridge.events import (
        RunRegistered as RunRegistered,
    )
    from bridge.events import (
        ServerUnreachable as ServerUnreachable,
    )
    from bridge.events import (
        StepRecoverableFailure as StepRecoverableFailure,
    )
    from bridge.events import (
        TaskCancelRequested as TaskCancelRequested,
    )
    from bridge.events import (
        TaskCreated as TaskCreated,
    )
    from bridge.events import (
        TaskDetached as TaskDetached,
    )
    from bridge.events import (
        TaskInputAnswered as TaskInputAnswered,
    )
    from bridge.events import (
        TaskInputDeclined as TaskInputDeclined,
    )
    from bridge.events import (
        TaskInputHandlerFailed as TaskInputHandlerFailed,
    )
    from bridge.events import (
        TaskInputRequired as TaskInputRequired,
    )
    from bridge.events import (
        TaskInputStuck as TaskInputStuck,
    )
    from bridge.events import (
        TaskLost as TaskLost,
    )
    from bridge.events import (
        TaskStatusChanged as TaskStatusChanged,
    )
    from bridge.events import (
        TaskTerminal as TaskTerminal,
    )
    from bridge.facade import (
        Bridge as Bridge,
    )
    from bridge.ledger.agent_states import (
        AgentStateView as AgentStateView,
    )
    from bridge.ledger.coordination.replica import (
        ReplicaConfig as ReplicaConfig,
    )
    from bridge.ledger.reads.views import (
        CallInputView as CallInputView,
    )
    from bridge.ledger.reads.views import (
        DispatchView as DispatchView,
    )
    from bridge.ledger.reads.views import (
        InputRequestView as InputRequestView,
    )
    from bridge.ledger.reads.views import (
        RunView as RunView,
    )
    from bridge.ledger.reads.views import (
        TaskView as TaskView,
    )
    from bridge.lifecycle import (
        Admission as Admission,
    )
    from bridge.lifecycle import (
        DispatchState as DispatchState,
    )
    from bridge.lifecycle import (
        LostReason as LostReason,
    )
    from bridge.lifecycle import (
        OuterStatus as OuterStatus,
    )
    from bridge.lifecycle import (
        TaskStatus as TaskStatus,
    )
    from bridge.mcp.calls.admission import (
        AdmissionChecks as AdmissionChecks,
    )
    from bridge.mcp.calls.admission import (
        OperationView as OperationView,
    )
    from bridge.mcp.inputs.handlers import (
        HOST as HOST,
    )
    from bridge.mcp.inputs.handlers import (
        Accept as Accept,
    )
    from bridge.mcp.inputs.handlers import (
        Cancel as Cancel,
    )
    from bridge.mcp.inputs.handlers import (
        Decline as Decline,
    )
    from bridge.mcp.inputs.handlers import (
        FormElicitation as FormElicitation,
    )
    from bridge.mcp.inputs.handlers import (
        InputHandlers as InputHandlers,
    )
    from bridge.mcp.inputs.handlers import (
        InputHandling as InputHandling,
    )
    from bridge.mcp.inputs.handlers import (
        UrlElicitation as UrlElicitation,
    )
    from bridge.mcp.polling.push import (
        PushConfig as PushConfig,
    )
    from bridge.mcp.polling.watches import (
        SchedulerConfig as SchedulerConfig,
    )
    from bridge.mcp.servers import (
        CredentialResolver as CredentialResolver,
    )
    from bridge.mcp.servers import (
        McpServerConfig as McpServerConfig,
    )
    from bridge.outcomes import (
        AnswerDelivery as AnswerDelivery,
    )
    from bridge.outcomes import (
        AnswerReceipt as AnswerReceipt,
    )
    from bridge.outcomes import (
        CallOutcome as CallOutcome,
    )
    from bridge.outcomes import (
        InlineResult as InlineResult,
    )
    from bridge.outcomes import (
        InputPending as InputPending,
    )
    from bridge.outcomes import (
        InputRequest as InputRequest,
    )
    from bridge.outcomes import (
        RejectedCall as RejectedCall,
    )
    from bridge.outcomes import (
        TaskHandle as TaskHandle,
    )
    from bridge.outcomes import (
        UnknownOutcome as UnknownOutcome,
    )
    from bridge.policies import (
        InputPolicy as InputPolicy,
    )
    from bridge.policies import (
        OnOuterCancel as OnOuterCancel,
    )
    from bridge.policies import (
        OnOuterEnd as OnOuterEnd,
    )
    from bridge.policies import (
        OnStuckInput as OnStuckInput,
    )
    from bridge.policies import (
        Policies as Policies,
    )
    from bridge.policies import (
        ToolPolicy as ToolPolicy,
    )
    from bridge.policies import (
        UnansweredInput as UnansweredInput,
    )
    from bridge.policies import (
        UnknownOutcomePolicy as UnknownOutcomePolicy,
    )
    from bridge.policies import (
        WaitMode as WaitMode,
    )
    from bridge.run import (
        Run as Run,
    )
    from bridge.runtime.recovery_report import (
        RecoveryReport as RecoveryReport,
    )
    from bridge.runtime.step_results import (
        OperationRecord as OperationRecord,
    )
    from bridge.runtime.step_results import (
        RecoverableFailure as RecoverableFailure,
    )
    from bridge.runtime.step_results import (
        StepOutcome as StepOutcome,
    )
    from bridge.runtime.step_results import (
        TaskPending as TaskPending,
    )
    from bridge.runtime.step_results import (
        TaskSettled as TaskSettled,
    )
    from bridge.settings import (
        BridgeSettings as BridgeSettings,
    )
    from bridge.settings import (
        UhpServerConfig as UhpServerConfig,
    )
    from bridge.telemetry.spans import (
        setup_tracing as setup_tracing,
    )
    from bridge.uhp.client import (
        FollowConfig as FollowConfig,
    )
    from bridge.uhp.client import (
        UnansweredPost as UnansweredPost,
    )
    from bridge.uhp.errors import (
        RequestNotRepostable as RequestNotRepostable,
    )
    from bridge.uhp.errors import (
        ResponseNotFollowable as ResponseNotFollowable,
    )
    from bridge.uhp.errors import (
        StreamFault as StreamFault,
    )
    from bridge.uhp.errors import (
        UhpAuthError as UhpAuthError,
    )
    from bridge.uhp.errors import (
        UhpError as UhpError,
    )
    from bridge.uhp.errors import (
        UhpInvalidRequest as UhpInvalidRequest,
    )
    from bridge.uhp.errors import (
        UhpNotFound as UhpNotFound,
    )
    from bridge.uhp.errors import (
        UhpQuotaExhausted as UhpQuotaExhausted,
    )
    from bridge.uhp.errors import (
        UhpRateLimited as UhpRateLimited,
    )
    from bridge.uhp.errors import (
        UhpServerError as UhpServerError,
    )
    from bridge.uhp.errors import (
        UhpSessionBusy as UhpSessionBusy,
    )
    from bridge.uhp.errors import (
        UhpUnsupportedVersion as UhpUnsupportedVersion,
    )

# Where each public name lives (a name is defined in exactly one place).
_EXPORTS: dict[str, str] = {
    "Bridge": "bridge.facade",
    "UhpServerConfig": "bridge.settings",
    "BridgeSettings": "bridge.settings",
    "Run": "bridge.run",
    "OperationRecord": "bridge.runtime.step_results",
    "RecoverableFailure": "bridge.runtime.step_results",
    "StepOutcome": "bridge.runtime.step_results",
    "TaskPending": "bridge.runtime.step_results",
    "TaskSettled": "bridge.runtime.step_results",
    "AnswerDelivery": "bridge.outcomes",
    "AnswerReceipt": "bridge.outcomes",
    "CallOutcome": "bridge.outcomes",
    "InlineResult": "bridge.outcomes",
    "InputPending": "bridge.outcomes",
    "RejectedCall": "bridge.outcomes",
    "TaskHandle": "bridge.outcomes",
    "UnknownOutcome": "bridge.outcomes",
    "InputRequest": "bridge.outcomes",
    "Accept": "bridge.mcp.inputs.handlers",
    "Cancel": "bridge.mcp.inputs.handlers",
    "Decline": "bridge.mcp.inputs.handlers",
    "FormElicitation": "bridge.mcp.inputs.handlers",
    "HOST": "bridge.mcp.inputs.handlers",
    "InputHandlers": "bridge.mcp.inputs.handlers",
    "InputHandling": "bridge.mcp.inputs.handlers",
    "UrlElicitation": "bridge.mcp.inputs.handlers",
    "InputPolicy": "bridge.policies",
    "OnStuckInput": "bridge.policies",
    "UnansweredInput": "bridge.policies",
    "TaskInputDeclined": "bridge.events",
    "TaskInputHandlerFailed": "bridge.events",
    "TaskInputStuck": "bridge.events",
    "RecoveryReport": "bridge.runtime.recovery_report",
    "UnansweredPost": "bridge.uhp.client",
    "CallInputView": "bridge.ledger.reads.views",
    "AgentStateView": "bridge.ledger.agent_states",
    "DispatchView": "bridge.ledger.reads.views",
    "InputRequestView": "bridge.ledger.reads.views",
    "RunView": "bridge.ledger.reads.views",
    "TaskView": "bridge.ledger.reads.views",
    "DispatchState": "bridge.lifecycle",
    "LostReason": "bridge.lifecycle",
    "Admission": "bridge.lifecycle",
    "AdmissionChecks": "bridge.mcp.calls.admission",
    "OperationView": "bridge.mcp.calls.admission",
    "OuterStatus": "bridge.lifecycle",
    "TaskStatus": "bridge.lifecycle",
    "OnOuterCancel": "bridge.policies",
    "OnOuterEnd": "bridge.policies",
    "Policies": "bridge.policies",
    "ToolPolicy": "bridge.policies",
    "UnknownOutcomePolicy": "bridge.policies",
    "WaitMode": "bridge.policies",
    "CredentialResolver": "bridge.mcp.servers",
    "McpServerConfig": "bridge.mcp.servers",
    "SchedulerConfig": "bridge.mcp.polling.watches",
    "PushConfig": "bridge.mcp.polling.push",
    "FollowConfig": "bridge.uhp.client",
    "ReplicaConfig": "bridge.ledger.coordination.replica",
    "FINAL_TASK_EVENTS": "bridge.events",
    "Anomaly": "bridge.events",
    "BridgeEvent": "bridge.events",
    "CallInputAnswered": "bridge.events",
    "CallInputDeclined": "bridge.events",
    "CallInputHandlerFailed": "bridge.events",
    "CallInputRequired": "bridge.events",
    "CallResult": "bridge.events",
    "CallUnknownOutcome": "bridge.events",
    "CallAdmissionChecked": "bridge.events",
    "OuterIdsRecorded": "bridge.events",
    "OuterOpenTasks": "bridge.events",
    "OuterResumed": "bridge.events",
    "OuterFieldsIgnored": "bridge.events",
    "OuterStatusChanged": "bridge.events",
    "OuterStreamLost": "bridge.events",
    "OuterTerminal": "bridge.events",
    "RunRegistered": "bridge.events",
    "ServerUnreachable": "bridge.events",
    "StepRecoverableFailure": "bridge.events",
    "TaskCancelRequested": "bridge.events",
    "TaskCreated": "bridge.events",
    "TaskDetached": "bridge.events",
    "TaskInputAnswered": "bridge.events",
    "TaskInputRequired": "bridge.events",
    "TaskLost": "bridge.events",
    "TaskStatusChanged": "bridge.events",
    "TaskTerminal": "bridge.events",
    "AnswerRefused": "bridge.errors",
    "BridgeError": "bridge.errors",
    "ConflictingIds": "bridge.errors",
    "DuplicateTaskHandle": "bridge.errors",
    "InputAlreadyAnswered": "bridge.errors",
    "InvalidInputAnswer": "bridge.errors",
    "InvalidTaskResponse": "bridge.errors",
    "InvalidTransition": "bridge.errors",
    "LeaseLost": "bridge.errors",
    "LedgerError": "bridge.errors",
    "MalformedTaskHandle": "bridge.errors",
    "LedgerUnavailable": "bridge.errors",
    "AgentStateTooLarge": "bridge.errors",
    "McpSideError": "bridge.errors",
    "NoToolResult": "bridge.errors",
    "NotFound": "bridge.errors",
    "OperationReused": "bridge.errors",
    "ServerConnectFailed": "bridge.errors",
    "TaskRequestFailed": "bridge.errors",
    "UnknownInputKey": "bridge.errors",
    "UnknownServer": "bridge.errors",
    "WaitTimedOut": "bridge.errors",
    "ResponseNotFollowable": "bridge.uhp.errors",
    "RequestNotRepostable": "bridge.uhp.errors",
    "StreamFault": "bridge.uhp.errors",
    "UhpAuthError": "bridge.uhp.errors",
    "UhpError": "bridge.uhp.errors",
    "UhpInvalidRequest": "bridge.uhp.errors",
    "UhpNotFound": "bridge.uhp.errors",
    "UhpQuotaExhausted": "bridge.uhp.errors",
    "UhpRateLimited": "bridge.uhp.errors",
    "UhpServerError": "bridge.uhp.errors",
    "UhpSessionBusy": "bridge.uhp.errors",
    "UhpUnsupportedVersion": "bridge.uhp.errors",
    "setup_tracing": "bridge.telemetry.spans",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
