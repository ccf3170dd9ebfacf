"""``GET /v1/uhp``: what the server is and what it supports (served without a credential)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.uhp.serving._versions import V2026_09_12, V2026_09_28

#: Every capability the discovery chapter names. An absent capability means false, but a
#: server states each one so that a reader never has to know the rule.
CORE_CAPABILITIES = (
    "streaming",
    "sessions",
    "cancellation",
    "files_input",
    "files_output",
    "session_listing",
    "harness_management",
    "session_sharing",
    "idempotency",
)
#: Capabilities a later version introduced, with that version. A server serving it states
#: each one (``false`` unless it implements it): a Core harness leaves both off.
VERSIONED_CAPABILITIES = {"plugins": V2026_09_12, "environments": V2026_09_28}


def discovery_document(
    *,
    versions: Sequence[str],
    default_version: str,
    capabilities: Mapping[str, bool],
    conformance_class: str = "core",
    implementation: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``uhp.discovery`` object; capabilities not given are stated as ``false``, the
    versioned ones too once the newest version served introduced them."""
    newest = max(versions)  # dates sort
    named = [*CORE_CAPABILITIES, *(c for c, v in VERSIONED_CAPABILITIES.items() if v <= newest)]
    stated = {name: False for name in named}
    stated.update(capabilities)
    document: dict[str, Any] = {
        "object": "uhp.discovery",
        "protocol": "uhp",
        "versions": list(versions),
        "default_version": default_version,
        "conformance_class": conformance_class,
        "capabilities": stated,
    }
    if implementation is not None:
        document["implementation"] = dict(implementation)
    return document
