"""The optional capabilities later UHP versions introduced, and how a server that leaves one off
answers for it, per version.

``2026-09-12`` added plugins, ``2026-09-28`` environments, ``2026-10-04`` memories. A server
states each capability of the version a request negotiated (lifecycle §2: ``false`` rather than
omitted), and none of a later version: a client of ``2026-08-11`` never reads a key its version
does not define. A chapter a server does not implement answers its endpoints with ``404``
(plugins §7, environments §7, memories §11), and a task that names one of its objects in
``metadata`` is refused before it starts with the chapter's own not-found code
(environments §5, memories §9): at an earlier version that key is plain metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from bridge.uhp.serving._envelope import UhpApiError, not_found
from bridge.uhp.serving._versions import V2026_09_12, V2026_09_28, V2026_10_04

#: The capabilities ``2026-08-11`` named, stated at every version.
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


@dataclass(frozen=True, slots=True)
class VersionedCapability:
    """An optional capability a later version introduced."""

    name: str
    since: str  # the version that introduced it
    paths: tuple[str, ...]  # the chapter's endpoints, as Starlette route paths
    task_key: str | None = None  # the ``metadata`` key a task names one of its objects by
    not_found_code: str | None = None  # the chapter's code for an object that is not there


VERSIONED_CAPABILITIES = (
    VersionedCapability("plugins", V2026_09_12, ("/v1/harnesses/{harness_id}/plugin",)),
    VersionedCapability(
        "environments",
        V2026_09_28,
        ("/v1/environments", "/v1/environments/{rest:path}"),
        task_key="environment",
        not_found_code="environment_not_found",
    ),
    VersionedCapability(
        "memories",
        V2026_10_04,
        ("/v1/memories", "/v1/memories/{rest:path}", "/v1/harnesses/{harness_id}/memories"),
        task_key="memory",
        not_found_code="memory_not_found",
    ),
)
_VERSIONED = {c.name: c for c in VERSIONED_CAPABILITIES}
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def capabilities_at(version: str) -> tuple[str, ...]:
    """Every capability ``version`` defines, in discovery order (dates sort)."""
    later = (c.name for c in VERSIONED_CAPABILITIES if c.since <= version)
    return (*CORE_CAPABILITIES, *later)


def stated_capabilities(version: str, implemented: Mapping[str, Any]) -> dict[str, Any]:
    """The ``capabilities`` object at ``version``: each one it defines (``false`` unless
    ``implemented`` says otherwise), a server's own extra keys kept, a later version's dropped."""
    stated: dict[str, Any] = {name: False for name in capabilities_at(version)}
    for name, value in implemented.items():
        introduced = _VERSIONED.get(name)
        if introduced is None or introduced.since <= version:
            stated[name] = value
    return stated


def absent_capability_routes(implemented: Mapping[str, Any]) -> list[BaseRoute]:
    """Routes answering the endpoints of every capability not implemented with the chapter's
    ``404`` (put them after the app's own routes). A path nothing serves would be a 404 too;
    these say which capability is off, so a client reads why rather than guessing."""
    routes: list[BaseRoute] = []
    for capability in VERSIONED_CAPABILITIES:
        if implemented.get(capability.name) is True:
            continue

        async def absent(request: Request, name: str = capability.name) -> Response:
            raise UhpApiError(
                404,
                "invalid_request_error",
                "not_found",
                f"This server does not implement {name} (GET /v1/uhp states {name}: false).",
                detail={"capability": name},
            )

        routes.extend(Route(path, absent, methods=_METHODS) for path in capability.paths)
    return routes


def refuse_absent_references(
    metadata: Mapping[str, Any], version: str, implemented: Mapping[str, Any]
) -> None:
    """Refuse, before the task starts, a task whose ``metadata`` names an environment or a
    memory at a version that defines the key, on a server without the capability: nothing of
    that kind is in the caller's scope, so the chapter's not-found code answers."""
    for capability in VERSIONED_CAPABILITIES:
        key, code = capability.task_key, capability.not_found_code
        if key is None or code is None or capability.since > version:
            continue
        if implemented.get(capability.name) is True or metadata.get(key) is None:
            continue
        error = not_found(
            code, f"No {key} {metadata[key]!r} (this server has no {capability.name})."
        )
        error.param = f"metadata.{key}"
        raise error
