"""The gateway config's ``webhook`` per principal: parsed into the bridge's endpoints, refused
with a message naming the principal when malformed."""

from __future__ import annotations

import pytest

from bridge.gateway._config import GatewayConfigError, parse_gateway_config

DIGEST = "a" * 64
OTHER = "b" * 64


def _config(**alice: object) -> dict[str, object]:
    return {
        "principals": {
            "alice": {"token_sha256": DIGEST, **alice},
            "bob": {"token_sha256": OTHER},
        }
    }


def test_a_principal_webhook_becomes_its_endpoint() -> None:
    hook = {"url": "https://hooks.example/bridge", "secret_ref": "alice-hook", "max_attempts": 3}
    config = parse_gateway_config(_config(webhook=hook), [])
    [endpoint] = config.webhooks
    assert (endpoint.principal, endpoint.url, endpoint.secret_ref) == (
        "alice",
        "https://hooks.example/bridge",
        "alice-hook",
    )
    assert endpoint.max_attempts == 3
    assert parse_gateway_config(_config(), []).webhooks == ()


@pytest.mark.parametrize(
    ("hook", "says"),
    [
        ("https://x", "is {"),
        ({"url": "https://x", "secret": "whsec_inline"}, "is {"),
        ({"url": "ftp://x", "secret_ref": "r"}, "http"),
        ({"url": "https://x"}, "secret_ref"),
    ],
)
def test_a_malformed_webhook_is_refused(hook: object, says: str) -> None:
    with pytest.raises(GatewayConfigError, match="principal 'alice': webhook") as refused:
        parse_gateway_config(_config(webhook=hook), [])
    assert says in str(refused.value)
