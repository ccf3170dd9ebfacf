"""Everything a bridge is opened with, in one value: :class:`BridgeSettings`.

    settings = BridgeSettings(ledger_url="bridge-ledger.db", principals=["acme"],
                              mcp_servers=[McpServerConfig(name="reports", url=REPORTS_URL)])
    async with Bridge.open(settings) as bridge: ...

A frozen value: build it once (from your own configuration), pass it around, derive variants
with :func:`dataclasses.replace`. Tokens are never part of it: ``credentials`` resolves a
server's ``credential_ref`` when a client connects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bridge._config import (
    CredentialResolver,
    FollowConfig,
    McpServerConfig,
    PushConfig,
    ReplicaConfig,
    SchedulerConfig,
    UhpServerConfig,
    no_credentials,
)
from bridge._ledger.retention.policy import Retention
from bridge._ledger.schema.dialects import SqliteSynchronous
from bridge._mcp.calls.admission import AdmissionChecks
from bridge._mcp.inputs.handlers import InputHandlers
from bridge._policies import Policies
from bridge._runtime.webhook_endpoint import WebhookEndpoint


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeSettings:
    """How a bridge is opened: its ledger, its scope, the servers it talks to, its policies.

    ``ledger_url``: a SQLite file path (the default, WAL) or a ``postgresql://…`` URL, migrated
    on open; ``Bridge(ledger, settings)`` on a ledger you opened yourself ignores it.
    ``principals``: this process's scope: every read and write is bound to one of them.
    ``sqlite_synchronous="FULL"``: SQLite commits also survive power loss (``"NORMAL"``, the
    default, survives a process crash). ``input_handlers``: who answers which input kinds, and
    so what is declared to each server (default: the host answers form elicitations).
    ``recover_on_start``: take back every open handle and run when the bridge opens.
    ``webhooks``: where each principal's attention items are pushed (at most one endpoint per
    principal; its secret resolved by ``credentials``; extra ``[webhooks]``).
    ``retention``: when finished runs leave the ledger (``None``, the default: never): one
    :class:`~bridge.RetentionPolicy` for every principal, or a mapping of principal to policy
    (a principal missing from it keeps everything); a running bridge prunes on its schedule,
    one bridge per ledger at a time (docs/guides/retention.md).
    """

    principals: Sequence[str]
    ledger_url: str | Path | None = None
    mcp_servers: Sequence[McpServerConfig] = ()
    uhp_servers: Sequence[UhpServerConfig] = ()
    credentials: CredentialResolver = no_credentials
    policies: Policies = field(default_factory=Policies)
    scheduler: SchedulerConfig | None = None
    push: PushConfig | None = None
    follow: FollowConfig | None = None
    replica: ReplicaConfig | None = None
    input_handlers: InputHandlers | None = None
    admission_checks: AdmissionChecks | None = None
    recover_on_start: bool = True
    sqlite_synchronous: SqliteSynchronous = "NORMAL"
    webhooks: Sequence[WebhookEndpoint] = ()
    retention: Retention | None = None

    def __post_init__(self) -> None:
        if isinstance(self.principals, str):
            raise TypeError("principals is a sequence of principal names, not one string")
        if not self.principals:
            raise ValueError("a bridge serves at least one principal/tenant")
        hooked = [endpoint.principal for endpoint in self.webhooks]
        if len(set(hooked)) != len(hooked):
            raise ValueError("at most one webhook endpoint per principal")
        strangers = sorted(set(hooked) - set(self.principals))
        if strangers:
            raise ValueError(f"webhooks for principals this bridge does not serve: {strangers}")
