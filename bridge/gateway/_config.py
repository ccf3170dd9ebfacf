"""The gateway's config file.

``mcpServers`` is the operator CLI's MCP config (upstreams, credentials by reference). The
gateway adds who may call it and how long a plain ``tools/call`` waits::

    {
      "mcpServers": [{"name": "payments", "url": "http://…/mcp",
                      "auth": {"credential_ref": "payments"}}],
      "principals": {"alice": {"token_sha256": "<hex SHA-256 of alice's bearer token>",
                               "webhook": {"url": "https://…", "secret_ref": "alice-hook"}}},
      "waitDeadlineS": 120,
      "toolDeadlinesS": {"payments__approve_payment": 30},
      "silentWaitS": 50,
      "stdioPrincipal": "alice"
    }

``silentWaitS`` caps the wait of a call that sent no ``progressToken``: such a client hears
nothing while it waits, and the official TypeScript SDK (so the MCP Inspector CLI) gives up
after 60 s of silence. It gets the "still running" answer, with its operation id, in time.

``stdioPrincipal`` (optional, one of ``principals``) is who ``bridge gateway --stdio`` serves
when no ``--principal`` is given: stdio carries no bearer token.

``webhook`` (optional, per principal): where the principal's attention items are pushed,
signed with the secret ``secret_ref`` names (``BRIDGE_CREDENTIAL_<REF>``, like upstream tokens;
extra ``[webhooks]``; docs/guides/webhooks-and-metrics.md).

The file holds no secret: a client token is known only by its SHA-256.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge._config import McpServerConfig
from bridge._runtime.webhook_endpoint import WebhookEndpoint

DEFAULT_WAIT_DEADLINE_S = 120.0
DEFAULT_SILENT_WAIT_S = 50.0  # under the 60 s request timeout of the official TypeScript SDK
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class GatewayConfigError(ValueError):
    """The config file is not usable (the message says which entry and why)."""


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    servers: tuple[McpServerConfig, ...]
    token_principals: Mapping[str, str]  # SHA-256 hex of a bearer token -> principal
    wait_deadline_s: float = DEFAULT_WAIT_DEADLINE_S
    tool_deadlines_s: Mapping[str, float] = field(default_factory=dict)
    stdio_principal: str | None = None
    silent_wait_s: float = DEFAULT_SILENT_WAIT_S
    webhooks: tuple[WebhookEndpoint, ...] = ()

    @property
    def principals(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.token_principals.values())))

    def checked_principal(self, principal: str) -> str:
        """``principal`` if the config names it (stdio serves only configured principals)."""
        if principal not in self.principals:
            raise GatewayConfigError(f"principal {principal!r} is not in the config")
        return principal

    def deadline_for(self, exposed_tool: str, *, hears_progress: bool = True) -> float:
        """How long a plain ``tools/call`` of ``exposed_tool`` waits for its task; at most
        :attr:`silent_wait_s` for a client that is sent no progress meanwhile."""
        deadline = self.tool_deadlines_s.get(exposed_tool, self.wait_deadline_s)
        return deadline if hears_progress else min(deadline, self.silent_wait_s)


def parse_gateway_config(data: Any, servers: Sequence[McpServerConfig]) -> GatewayConfig:
    """The gateway part of a config file's JSON (``servers`` parsed by the caller)."""
    if not isinstance(data, dict):
        raise GatewayConfigError("the gateway config must be a JSON object")
    principals = data.get("principals")
    if not isinstance(principals, dict) or not principals:
        raise GatewayConfigError('"principals" must map each principal to {"token_sha256": …}')
    digests: dict[str, str] = {}
    for principal, entry in principals.items():
        digest = entry.get("token_sha256") if isinstance(entry, dict) else None
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise GatewayConfigError(
                f"principal {principal!r}: token_sha256 must be 64 lowercase hex digits"
            )
        if digest in digests:
            raise GatewayConfigError(f"principal {principal!r} shares its token with another")
        digests[digest] = principal
    webhooks = tuple(
        _webhook(principal, entry["webhook"])
        for principal, entry in principals.items()
        if entry.get("webhook") is not None
    )
    for server in servers:
        if "__" in server.name:
            raise GatewayConfigError(f"server name {server.name!r} must not contain '__'")
    stdio_principal = data.get("stdioPrincipal")
    if stdio_principal is not None and stdio_principal not in principals:
        raise GatewayConfigError('"stdioPrincipal" must be one of "principals"')
    return GatewayConfig(
        servers=tuple(servers),
        stdio_principal=stdio_principal,
        token_principals=digests,
        wait_deadline_s=_seconds(
            data.get("waitDeadlineS", DEFAULT_WAIT_DEADLINE_S), "waitDeadlineS"
        ),
        tool_deadlines_s={
            name: _seconds(value, f"toolDeadlinesS.{name}")
            for name, value in (data.get("toolDeadlinesS") or {}).items()
        },
        silent_wait_s=_seconds(data.get("silentWaitS", DEFAULT_SILENT_WAIT_S), "silentWaitS"),
        webhooks=webhooks,
    )


def _webhook(principal: str, entry: Any) -> WebhookEndpoint:
    where = f"principal {principal!r}: webhook"
    if not isinstance(entry, dict) or set(entry) - {"url", "secret_ref", "max_attempts"}:
        raise GatewayConfigError(f'{where} is {{"url": …, "secret_ref": …[, "max_attempts"]}}')
    try:
        return WebhookEndpoint(
            principal=principal,
            url=str(entry.get("url", "")),
            secret_ref=str(entry.get("secret_ref", "")),
            max_attempts=int(entry.get("max_attempts", 10)),
        )
    except (TypeError, ValueError) as exc:
        raise GatewayConfigError(f"{where}: {exc}") from None


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise GatewayConfigError(f"{where} must be a positive number of seconds")
    return float(value)
