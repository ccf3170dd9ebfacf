"""``GET /v1/uhp``: what the server is and what it supports (served without a credential)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.uhp.serving._capabilities import stated_capabilities


def discovery_document(
    *,
    versions: Sequence[str],
    default_version: str,
    capabilities: Mapping[str, Any],
    served: str | None = None,
    conformance_class: str = "core",
    implementation: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``uhp.discovery`` object as served at ``served`` (the request's negotiated version,
    :func:`served_version`; the newest of ``versions`` when not given): every capability that
    version defines is stated, ``false`` unless ``capabilities`` says otherwise, and none a
    later version introduced."""
    version = served if served is not None else max(versions)  # dates sort
    document: dict[str, Any] = {
        "object": "uhp.discovery",
        "protocol": "uhp",
        "versions": list(versions),
        "default_version": default_version,
        "conformance_class": conformance_class,
        "capabilities": stated_capabilities(version, capabilities),
    }
    if implementation is not None:
        document["implementation"] = dict(implementation)
    return document
