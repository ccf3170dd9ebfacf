"""Where one principal's attention items are pushed: :class:`WebhookEndpoint` (plain data).

The signing secret is given by reference (``secret_ref``), resolved by the host's resolver
(``BridgeSettings.credentials``, the one that resolves MCP servers' ``credential_ref``) at
each delivery, so it is never in the settings' repr nor in the ledger, and a rotated secret is
picked up at the next attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookEndpoint:
    """One principal's webhook: ``url`` receives a signed POST (Standard Webhooks) per
    attention item; ``secret_ref`` names its ``whsec_…`` secret for the credentials resolver.

    A failed attempt is retried after ``first_retry_ms``, doubling up to ``max_retry_ms``; after
    ``max_attempts`` attempts the item is given up on and becomes a ``webhook_undeliverable``
    anomaly on its run.
    """

    principal: str
    url: str
    secret_ref: str
    max_attempts: int = 10
    first_retry_ms: int = 1_000
    max_retry_ms: int = 300_000
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.principal:
            raise ValueError("a webhook endpoint belongs to one principal")
        if urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"a webhook url is http(s)://…, not {self.url!r}")
        if not self.secret_ref:
            raise ValueError("a webhook endpoint needs a secret_ref (its secret, by reference)")
        if self.max_attempts < 1 or self.first_retry_ms < 1 or self.max_retry_ms < 1:
            raise ValueError("max_attempts, first_retry_ms and max_retry_ms are at least 1")

    def retry_delay_ms(self, attempts: int) -> int:
        """How long after its ``attempts``-th failed attempt an item is tried again."""
        doublings: int = max(0, min(attempts - 1, 30))
        return min(self.first_retry_ms << doublings, self.max_retry_ms)
