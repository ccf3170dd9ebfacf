"""Bearer authentication: ``Authorization: Bearer <token>`` -> the caller's principal.

The token is looked up by its digest and then compared in constant time, so neither the
lookup nor the comparison leaks how much of a guess was right. Only the principal leaves this
module; the token itself is never logged or stored by the kit. A missing or unknown token
answers ``401`` in the error envelope (``missing_credential`` / ``invalid_credential``) with a
``WWW-Authenticate`` challenge.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable

from starlette.requests import Request

from bridge.uhp.serving._envelope import UhpApiError


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def digest_principal(token: str) -> str:
    """A principal derived from a token: a digest prefix, never the token itself."""
    return "tok_" + token_digest(token)[:24]


class BearerAuth:
    """Maps the bearer tokens a server accepts to principals."""

    def __init__(
        self,
        tokens: Iterable[str],
        *,
        principal_of: Callable[[str], str] = digest_principal,
        realm: str = "uhp",
    ) -> None:
        self._known = {token_digest(t): (t, principal_of(t)) for t in tokens}
        self._challenge = {"WWW-Authenticate": f'Bearer realm="{realm}"'}

    @property
    def principals(self) -> list[str]:
        """Every principal a token maps to, sorted."""
        return sorted({principal for _, principal in self._known.values()})

    def principal(self, request: Request) -> str:
        """The caller's principal; raises the 401 envelope when it has none."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise self._refusal(
                "missing_credential",
                "This endpoint needs an 'Authorization: Bearer <token>' header.",
            )
        known = self._known.get(token_digest(token))
        if known is None or not secrets.compare_digest(known[0], token):
            raise self._refusal("invalid_credential", "The bearer token is not valid.")
        return known[1]

    def _refusal(self, code: str, message: str) -> UhpApiError:
        return UhpApiError(401, "authentication_error", code, message, headers=self._challenge)
