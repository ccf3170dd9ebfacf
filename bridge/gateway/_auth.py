"""Bearer tokens to principals. The config knows each token only by its SHA-256; a request
without a known token is answered ``401`` before it reaches the MCP server. The token itself is
never logged or stored (the ledger sees only the principal)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge.uhp.serving._auth import token_digest


class GatewayTokens:
    def __init__(self, token_principals: Mapping[str, str]) -> None:
        self._principals = dict(token_principals)

    def principal(self, authorization: str | None) -> str | None:
        """The principal an ``Authorization: Bearer …`` header authenticates (``None``: none)."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        digest = token_digest(token)
        for known, principal in self._principals.items():
            if secrets.compare_digest(known, digest):
                return principal
        return None


class RequireBearer:
    """ASGI wrapper: HTTP requests without a known bearer token get ``401``."""

    def __init__(self, app: ASGIApp, tokens: GatewayTokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.tokens.principal(Headers(scope=scope).get("authorization")) is not None:
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {"error": "invalid_token", "error_description": "a known bearer token is required"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="bridge-gateway"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
