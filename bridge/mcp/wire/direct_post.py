"""The lean path's POST handed straight to the aiohttp engine, as ``httpx2`` would have sent it.

Sent through the ``httpx2`` client, a lean ``tasks/get`` on the aiohttp engine still spent about
a third of its client CPU in ``httpx2`` itself: building the request (URL merge, header
objects), the client's auth, redirect and cookie layers, and the body read through its stream
wrappers. For one connection the header lines ``httpx2`` builds for these requests differ only
in two values, ``Content-Length`` and ``Mcp-Name``; so ``httpx2`` builds them once, as a template
per set of stamped headers, and each request fills the two values in. The body is encoded as
``httpx2`` encodes JSON. The request goes to the same aiohttp engine, on the same pool, as the
client's own transport, and a response that is no answer (none at all, 429/503) becomes the
isolating transport's own JSON-RPC error, so nothing above can tell the two routes apart;
``tests/test_mcp_lean_get.py`` checks the bytes against the SDK path's. The usual reply (200
JSON, no content coding) is read whole by the lean path (:mod:`.lean_get`); any other goes
through an ``httpx2`` response.

Taken only while nothing ``httpx2`` would add per request is in play: no ``httpx2`` auth, no
event hooks, no cookies (once a server sets one, requests go through the client, which sends
it), and on asyncio.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx2
from mcp.shared.inbound import MCP_NAME_HEADER

from bridge.mcp.wire.aiohttp_transport import AiohttpTransport, available
from bridge.mcp.wire.transport import IsolatingTransport

_MAX_TEMPLATES = 32  # distinct stamped-header sets per connection (one per protocol version)
_NAME_KEY = MCP_NAME_HEADER.lower()


@dataclass(frozen=True, slots=True)
class _Template:
    lines: tuple[tuple[str, str], ...]
    length_at: int  # the Content-Length line
    name_at: int | None  # the Mcp-Name line, if the request has one


def encode_json(body: dict[str, Any]) -> bytes:
    """The body bytes ``httpx2`` sends for ``json=body``."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


@dataclass(slots=True)
class DirectPost:
    """One server's route: its ``httpx2`` client (templates, timeouts), isolating transport
    (failures and refusals) and aiohttp engine (the exchange)."""

    http: httpx2.AsyncClient
    isolating: IsolatingTransport
    engine: AiohttpTransport
    _templates: dict[tuple[Any, ...], _Template] = field(default_factory=dict)

    def usable(self) -> bool:
        """Whether a request sent here is the one the client would send (see module doc)."""
        hooks = self.http.event_hooks
        return (
            available()
            and self.http.auth is None
            and not self.http.cookies
            and not hooks["request"]
            and not hooks["response"]
        )

    def header_lines(
        self, url: httpx2.URL, headers: dict[str, str], body_length: int
    ) -> list[tuple[str, str]]:
        """The header lines ``httpx2`` builds for a JSON POST of ``body_length`` bytes."""
        name = None
        rest = []
        for key, value in headers.items():
            if key.lower() == _NAME_KEY:
                name = value
            else:
                rest.append((key, value))
        template_key = (url, name is not None, *rest)
        template = self._templates.get(template_key)
        if template is None:
            built = self.http.build_request("POST", url, json={}, headers=headers)
            raw = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in built.headers.raw)
            names = [k.lower() for k, _ in raw]
            name_at = names.index(_NAME_KEY) if name is not None else None
            template = _Template(raw, names.index("content-length"), name_at)
            if len(self._templates) >= _MAX_TEMPLATES:
                self._templates.clear()
            self._templates[template_key] = template
        lines = list(template.lines)
        lines[template.length_at] = (lines[template.length_at][0], str(body_length))
        if template.name_at is not None and name is not None:
            lines[template.name_at] = (lines[template.name_at][0], name)
        return lines

    async def post(
        self, url: httpx2.URL, headers: dict[str, str], body: dict[str, Any]
    ) -> aiohttp.ClientResponse | dict[str, Any]:
        """The response (body unread; the caller releases it), or the isolating transport's
        JSON-RPC error body when there is no answer."""
        payload = encode_json(body)
        lines = self.header_lines(url, headers, len(payload))
        try:
            response = await self.engine.open(
                "POST", str(url), lines, payload, self.http.timeout.as_dict()
            )
        except httpx2.TransportError as exc:
            return self.isolating.failed(exc)
        refusal = self.isolating.refused(response.status, response.headers.get, had_session=False)
        if refusal is not None:
            response.close()
            return refusal
        return response
