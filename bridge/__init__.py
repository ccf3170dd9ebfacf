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

from typing import TYPE_CHECKING, Any

from bridge._public import load_public

if TYPE_CHECKING:
    from bridge._config import (
        CredentialResolver as CredentialResolver,
        FollowConfig as FollowConfig,
        McpServerConfig as McpServerConfig,
        PushConfig as PushConfig,
        ReplicaConfig as ReplicaConfig,
        SchedulerConfig as SchedulerConfig,
        UhpServerConfig as UhpServerConfig,
    )
    from bridge._facade import (
        Bridge as Bridge,
    )
    from bridge._ledger.agent_states import (
        AgentStateView as AgentStateView,
    )
    from bridge._ledger.reader import (
        LedgerReader as LedgerReader,
    )
    from bridge._ledger.reads.views import (
        AttentionItem as AttentionItem,
        CallInputView as CallInputView,
        CallView as CallView,
        InputRequestView as InputRequestView,
        RunView as RunView,
        TaskView as TaskView,
    )
    from bridge._ledger.retention.policy import (
        RetentionPolicy as RetentionPolicy,
    )
    from bridge._ledger.store import (
        Ledger as Ledger,
    )
    from bridge._lifecycle import (
        Admission as Admission,
        CallState as CallState,
        LostReason as LostReason,
        OuterStatus as OuterStatus,
        TaskStatus as TaskStatus,
    )
    from bridge._mcp.calls.admission import (
        AdmissionChecks as AdmissionChecks,
    )
    from bridge._mcp.inputs.handlers import (
        HOST as HOST,
        Accept as Accept,
        Decline as Decline,
        Dismiss as Dismiss,
        FormElicitation as FormElicitation,
        InputHandlers as InputHandlers,
        InputHandling as InputHandling,
        UrlElicitation as UrlElicitation,
    )
    from bridge._outcomes import (
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
    from bridge._policies import (
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
    from bridge._run import (
        Run as Run,
    )
    from bridge._runtime.recovery_report import (
        RecoveryReport as RecoveryReport,
    )
    from bridge._runtime.step_results import (
        RecoverableFailure as RecoverableFailure,
        TaskPending as TaskPending,
        TaskSettled as TaskSettled,
    )
    from bridge._runtime.webhook_endpoint import (
        WebhookEndpoint as WebhookEndpoint,
    )
    from bridge._settings import (
        BridgeSettings as BridgeSettings,
    )
    from bridge._telemetry.spans import (
        setup_tracing as setup_tracing,
    )

# Where each public name lives (a name is defined in exactly one place).
_EXPORTS: dict[str, str] = {
    "Bridge": "bridge._facade",
    "UhpServerConfig": "bridge._config",
    "WebhookEndpoint": "bridge._runtime.webhook_endpoint",
    "BridgeSettings": "bridge._settings",
    "Run": "bridge._run",
    "RecoverableFailure": "bridge._runtime.step_results",
    "TaskPending": "bridge._runtime.step_results",
    "TaskSettled": "bridge._runtime.step_results",
    "AnswerDelivery": "bridge._outcomes",
    "AnswerReceipt": "bridge._outcomes",
    "CallOutcome": "bridge._outcomes",
    "OutcomeKind": "bridge._outcomes",
    "InlineResult": "bridge._outcomes",
    "InputPending": "bridge._outcomes",
    "RejectedCall": "bridge._outcomes",
    "TaskHandle": "bridge._outcomes",
    "UnknownOutcome": "bridge._outcomes",
    "InputRequest": "bridge._outcomes",
    "Accept": "bridge._mcp.inputs.handlers",
    "Dismiss": "bridge._mcp.inputs.handlers",
    "Decline": "bridge._mcp.inputs.handlers",
    "FormElicitation": "bridge._mcp.inputs.handlers",
    "HOST": "bridge._mcp.inputs.handlers",
    "InputHandlers": "bridge._mcp.inputs.handlers",
    "InputHandling": "bridge._mcp.inputs.handlers",
    "UrlElicitation": "bridge._mcp.inputs.handlers",
    "InputPolicy": "bridge._policies",
    "OnStuckInput": "bridge._policies",
    "UnansweredInput": "bridge._policies",
    "RecoveryReport": "bridge._runtime.recovery_report",
    "AttentionItem": "bridge._ledger.reads.views",
    "RetentionPolicy": "bridge._ledger.retention.policy",
    "CallInputView": "bridge._ledger.reads.views",
    "AgentStateView": "bridge._ledger.agent_states",
    "CallView": "bridge._ledger.reads.views",
    "InputRequestView": "bridge._ledger.reads.views",
    "RunView": "bridge._ledger.reads.views",
    "TaskView": "bridge._ledger.reads.views",
    "CallState": "bridge._lifecycle",
    "LostReason": "bridge._lifecycle",
    "Admission": "bridge._lifecycle",
    "AdmissionChecks": "bridge._mcp.calls.admission",
    "OuterStatus": "bridge._lifecycle",
    "TaskStatus": "bridge._lifecycle",
    "OnOuterCancel": "bridge._policies",
    "OnOuterEnd": "bridge._policies",
    "Policies": "bridge._policies",
    "ToolPolicy": "bridge._policies",
    "UnknownOutcomePolicy": "bridge._policies",
    "WaitMode": "bridge._policies",
    "CredentialResolver": "bridge._config",
    "McpServerConfig": "bridge._config",
    "SchedulerConfig": "bridge._config",
    "PushConfig": "bridge._config",
    "FollowConfig": "bridge._config",
    "Ledger": "bridge._ledger.store",
    "LedgerReader": "bridge._ledger.reader",
    "ReplicaConfig": "bridge._config",
    "setup_tracing": "bridge._telemetry.spans",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    return load_public(__name__, globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
