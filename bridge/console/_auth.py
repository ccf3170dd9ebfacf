"""Who is asking: bearer tokens to principals, and the signed session cookie of a login.

The console knows each principal's token only by its SHA-256 (from a tokens file), or hashes
the tokens it is given in the environment at start-up and keeps only the digests. A presented
token is compared against every known digest in constant time. Tokens are never stored in the
ledger, never logged and never put into a page.

A login (the token typed once into the login form) gets a session cookie: principal, a random
session id and an expiry, signed with HMAC-SHA256 under a key this process draws at start
(a restart logs everyone out). The cookie is ``HttpOnly`` and ``SameSite=Strict``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bridge._errors import BridgeError
from bridge.uhp.serving._auth import token_digest

TOKENS_ENV = "BRIDGE_CONSOLE_TOKENS"
SESSION_COOKIE = "bridge_console"
SESSION_TTL_S = 8 * 3600
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class ConsoleAuthError(BridgeError, ValueError):
    """The console's tokens cannot be read or do not have the expected shape."""


class ConsoleTokens:
    """Principal of a bearer token; built from digests only."""

    def __init__(self, digests: Mapping[str, str]) -> None:
        """``digests``: principal -> SHA-256 hex of its token."""
        if not digests:
            raise ConsoleAuthError("no console principals configured")
        seen: dict[str, str] = {}
        for principal, digest in digests.items():
            if not principal or not _DIGEST.match(digest):
                raise ConsoleAuthError(
                    f"principal {principal!r}: token_sha256 must be 64 lowercase hex digits"
                )
            if digest in seen:
                raise ConsoleAuthError(f"principal {principal!r} shares its token with another")
            seen[digest] = principal
        self._by_digest = seen

    @property
    def principals(self) -> tuple[str, ...]:
        """Every principal a token is configured for, sorted."""
        return tuple(sorted(self._by_digest.values()))

    def principal(self, token: str) -> str | None:
        """The principal ``token`` authenticates (``None``: none)."""
        if not token:
            return None
        digest = token_digest(token)
        found = None
        for known, principal in self._by_digest.items():  # every entry: no early exit
            if secrets.compare_digest(known, digest):
                found = principal
        return found

    @classmethod
    def from_file(cls, path: Path) -> ConsoleTokens:
        """``{"principals": {"alice": {"token_sha256": "<hex>"}, ...}}`` (the gateway's shape)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConsoleAuthError(f"cannot read tokens file {path}: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise ConsoleAuthError(f"tokens file {path} is not valid JSON: {exc.msg}") from exc
        entries = data.get("principals") if isinstance(data, dict) else None
        if not isinstance(entries, dict):
            raise ConsoleAuthError(f'tokens file {path}: expected {{"principals": {{...}}}}')
        digests = {}
        for principal, entry in entries.items():
            digest = entry.get("token_sha256") if isinstance(entry, dict) else None
            digests[str(principal)] = digest if isinstance(digest, str) else ""
        return cls(digests)

    @classmethod
    def from_env(cls, value: str) -> ConsoleTokens:
        """``alice=TOKEN,bob=TOKEN`` (the tokens are hashed here and forgotten)."""
        digests = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            principal, sep, token = item.partition("=")
            if not sep or not principal.strip() or not token.strip():
                raise ConsoleAuthError(f"{TOKENS_ENV}: expected principal=token[,principal=token]")
            digests[principal.strip()] = token_digest(token.strip())
        return cls(digests)


@dataclass(frozen=True, slots=True)
class Session:
    """An authenticated caller: its principal and the id its CSRF token is bound to."""

    principal: str
    session_id: str
    via_cookie: bool


class SessionSigner:
    """Issues and reads signed session cookies; mints each session's CSRF token."""

    def __init__(self, key: bytes | None = None, *, ttl_s: int = SESSION_TTL_S) -> None:
        self._key = key if key is not None else os.urandom(32)
        self.ttl_s = ttl_s

    def _mac(self, purpose: str, payload: bytes) -> str:
        mac = hmac.new(self._key, purpose.encode() + b"\0" + payload, hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def issue(self, principal: str, *, now: float | None = None) -> str:
        """A cookie value for a fresh session of ``principal``."""
        expires = int((now if now is not None else time.time()) + self.ttl_s)
        body = json.dumps({"p": principal, "s": secrets.token_urlsafe(18), "e": expires})
        payload = base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")
        return f"{payload}.{self._mac('session', payload.encode())}"

    def read(self, value: str | None, *, now: float | None = None) -> Session | None:
        """The session a cookie value proves (``None``: absent, forged, garbled or expired)."""
        payload, _, mac = (value or "").partition(".")
        if not payload or not mac:
            return None
        if not secrets.compare_digest(mac, self._mac("session", payload.encode())):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            principal, session_id, expires = str(data["p"]), str(data["s"]), int(data["e"])
        except (ValueError, KeyError, TypeError):
            return None
        if expires <= (now if now is not None else time.time()):
            return None
        return Session(principal, session_id, via_cookie=True)

    def bearer_session(self, principal: str, token: str) -> Session:
        """The session of a bearer-authenticated request: its CSRF token is bound to the
        token's digest, so every form a bearer client posts carries one too."""
        return Session(principal, "bearer:" + token_digest(token), via_cookie=False)

    def csrf_token(self, session: Session) -> str:
        """The CSRF token every POST form of this session carries."""
        return self._mac("csrf", session.session_id.encode())

    def csrf_valid(self, session: Session, presented: str | None) -> bool:
        """Whether a posted CSRF token is this session's (constant-time)."""
        return bool(presented) and secrets.compare_digest(str(presented), self.csrf_token(session))
