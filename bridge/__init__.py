"""UHP <-> MCP Tasks bridge: the public API.

    settings = BridgeSettings(ledger_url="bridge-ledger.db", principals=["acme"], mcp_servers=[...])
    async with Bridge.open(settings) as b:
        run = await b.register_served_run("acme", response_id=..., session_id=..., harness_id=...)
        step = await run.call_tool("reports", "generate_report", {"quarter": "Q3"})
        async for event in run.subscribe(after_seq=0): ...

Every public name is importable from here; the event classes live in :mod:`bridge.events`
(``from bridge import events as ev``). They load on first use (PEP 562): ``import bridge``
itself loads neither SQLAlchemy, the MCP SDK, httpx nor OpenTelemetry.
See docs/guides/embed-in-a-harness.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.errors import (
        AgentStateTooLarge as AgentStateTooLarge,
        AnswerRefused as AnswerRefused,
        BridgeError as BridgeError,
        ConflictingIds as ConflictingIds,
        DuplicateTaskHandle as DuplicateTaskHandle,
        InputAlreadyAnswered as InputAlreadyAnswered,
        InvalidAnswer as InvalidAnswer,
        InvalidInputAnswer as InvalidInputAnswer,
        InvalidTaskResponse as InvalidTaskResponse,
        InvalidTransition as InvalidTransition,
        LeaseLost as LeaseLost,
        LedgerError as LedgerError,
        LedgerUnavailable as LedgerUnavailable,
        MalformedTaskHandle as MalformedTaskHandle,
        McpSideError as McpSideError,
        MissingExtra as MissingExtra,
        NotFound as NotFound,
        NoToolResult as NoToolResult,
        OperationReused as OperationReused,
        ServerConnectFailed as ServerConnectFailed,
        ServerCredentialsRejected as ServerCredentialsRejected,
        ServerNotReachable as ServerNotReachable,
        ServerTlsFailed as ServerTlsFailed,
        TaskRequestFailed as TaskRequestFailed,
        UnknownInputKey as UnknownInputKey,
        UnknownServer as UnknownServer,
        WaitTimedOut as WaitTimedOut,
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
        DispatchView as DispatchView,
        InputRequestView as InputRequestView,
        RunView as RunView,
        TaskView as TaskView,
    )
    from bridge.lifecycle import (
        Admission as Admission,
        DispatchState as DispatchState,
        LostReason as LostReason,
        OuterStatus as OuterStatus,
        TaskStatus as TaskStatus,
    )
    from bridge.mcp.calls.admission import (
        AdmissionChecks as AdmissionChecks,
        OperationView as OperationView,
    )
    from bridge.mcp.inputs.handlers import (
        HOST as HOST,
        Accept as Accept,
        Cancel as Cancel,
        Decline as Decline,
        FormElicitation as FormElicitation,
        InputHandlers as InputHandlers,
        InputHandling as InputHandling,
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
        McpServerConfig as McpServerConfig,
    )
    from bridge.outcomes import (
        AnswerDelivery as AnswerDelivery,
        AnswerReceipt as AnswerReceipt,
        CallOutcome as CallOutcome,
        InlineResult as InlineResult,
        InputPending as InputPending,
        InputRequest as InputRequest,
        OutcomeKind as OutcomeKind,
        RejectedCall as RejectedCall,
        TaskHandle as TaskHandle,
        UnknownOutcome as UnknownOutcome,
    )
    from bridge.policies import (
        InputPolicy as InputPolicy,
        OnOuterCancel as OnOuterCancel,
        OnOuterEnd as OnOuterEnd,
        OnStuckInput as OnStuckInput,
        Policies as Policies,
        ToolPolicy as ToolPolicy,
        UnansweredInput as UnansweredInput,
        UnknownOutcomePolicy as UnknownOutcomePolicy,
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
        RecoverableFailure as RecoverableFailure,
        TaskPending as TaskPending,
        TaskSettled as TaskSettled,
    )
    from bridge.settings import (
        BridgeSettings as BridgeSettings,
        UhpServerConfig as UhpServerConfig,
    )
    from bridge.telemetry.spans import (
        setup_tracing as setup_tracing,
    )
    from bridge.uhp.client import (
        FollowConfig as FollowConfig,
        UnansweredPost as UnansweredPost,
    )
    from bridge.uhp.errors import (
        RequestNotRepostable as RequestNotRepostable,
        ResponseNotFollowable as ResponseNotFollowable,
        StreamFault as StreamFault,
        UhpAuthError as UhpAuthError,
        UhpError as UhpError,
        UhpInvalidRequest as UhpInvalidRequest,
        UhpNotFound as UhpNotFound,
        UhpQuotaExhausted as UhpQuotaExhausted,
        UhpRateLimited as UhpRateLimited,
        UhpServerError as UhpServerError,
        UhpSessionBusy as UhpSessionBusy,
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
    "TaskPending": "bridge.runtime.step_results",
    "TaskSettled": "bridge.runtime.step_results",
    "AnswerDelivery": "bridge.outcomes",
    "AnswerReceipt": "bridge.outcomes",
    "CallOutcome": "bridge.outcomes",
    "OutcomeKind": "bridge.outcomes",
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
    "AnswerRefused": "bridge.errors",
    "BridgeError": "bridge.errors",
    "ConflictingIds": "bridge.errors",
    "DuplicateTaskHandle": "bridge.errors",
    "InputAlreadyAnswered": "bridge.errors",
    "InvalidInputAnswer": "bridge.errors",
    "InvalidAnswer": "bridge.errors",
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
    "ServerCredentialsRejected": "bridge.errors",
    "ServerTlsFailed": "bridge.errors",
    "ServerNotReachable": "bridge.errors",
    "MissingExtra": "bridge.errors",
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
