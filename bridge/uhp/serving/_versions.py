"""``UHP-Version`` negotiation (ASGI middleware).

A request may name the version it speaks; a version the server does not serve is refused with
``400 unsupported_protocol_version`` and ``detail.supported`` rather than silently substituted.
Every response, errors and streams included, carries the version served. A server can serve
several versions at once (``supported=SERVED_VERSIONS``); a handler reads the one this request
negotiated with :func:`served_version`.

Each version is additive to the one before (``2026-09-12`` added plugins, ``2026-09-28``
environments, ``2026-10-04`` memories, each an optional capability), so a Core server serves
all four from one code path: what differs is only which capabilities discovery states and how
the absent ones answer (``capabilities``).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge.uhp._models import VERSION_HEADER
from bridge.uhp.serving._envelope import UhpApiError

_SCOPE_KEY = "uhp_version"

V2026_08_11 = "2026-08-11"
V2026_09_12 = "2026-09-12"
V2026_09_28 = "2026-09-28"
V2026_10_04 = "2026-10-04"
#: What the kit serves, oldest first: the Core surface of all is the same (see the module doc).
SERVED_VERSIONS = (V2026_08_11, V2026_09_12, V2026_09_28, V2026_10_04)


class VersionNegotiation:
    """Wraps an ASGI app: refuses unsupported ``UHP-Version`` headers, stamps the served one."""

    def __init__(self, app: ASGIApp, *, supported: Sequence[str], default: str) -> None:
        if not supported or default not in supported:
            raise ValueError(f"default version {default!r} must be one of {list(supported)}")
        self.app = app
        self.supported = tuple(supported)
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asked = Headers(scope=scope).get(VERSION_HEADER)
        served = self.default if asked is None else asked.strip()
        if served not in self.supported:
            refusal = UhpApiError(
                400,
                "invalid_request_error",
                "unsupported_protocol_version",
                f"{VERSION_HEADER} {served!r} is not supported by this server.",
                param=VERSION_HEADER,
                detail={"supported": list(self.supported)},
                headers={VERSION_HEADER: self.default},
            )
            await refusal.response()(scope, receive, send)
            return
        scope.setdefault("state", {})[_SCOPE_KEY] = served

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[VERSION_HEADER] = served
            await send(message)

        await self.app(scope, receive, stamped)


def served_version(request: Request) -> str:
    """The version negotiated for this request (only inside :class:`VersionNegotiation`)."""
    version = request.scope.get("state", {}).get(_SCOPE_KEY)
    if not isinstance(version, str):
        raise RuntimeError("served_version() needs the app wrapped in VersionNegotiation")
    return version
