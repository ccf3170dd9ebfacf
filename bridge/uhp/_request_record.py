"""The POST body of a remotely created run, as the ledger keeps it (``request_json``).

It is committed with the run's ``Idempotency-Key`` before the POST, so that a process that
recovers a run which never got a response id can send the same request again with the same
key (the server then answers with the first request's response, never a second execution).

Credentials never reach the ledger: the client's own bearer token travels in a header and is
never part of the body, and a body field that looks like a credential (by its name, or because
its text contains the client's token) is replaced by :data:`REDACTED` and listed. A recorded
body with a redaction is no longer the request that was sent, so it cannot be re-sent as it is
(the server would refuse a different body under the same key): :class:`RecordedRequest` says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bridge._redaction import is_credential_name

REDACTED = "[redacted-credential]"


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A run's recorded POST body; ``redacted`` lists the JSON paths replaced by REDACTED."""

    body: dict[str, Any]
    redacted: tuple[str, ...] = ()

    @property
    def repostable(self) -> bool:
        """Can the body be sent again as it is (nothing was scrubbed out of it)?"""
        return not self.redacted

    def to_json(self) -> str:
        return json.dumps({"body": self.body, "redacted": list(self.redacted)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RecordedRequest:
        data = json.loads(text)
        return cls(body=data["body"], redacted=tuple(data.get("redacted") or ()))


def record_request(body: dict[str, Any], token: str) -> RecordedRequest:
    """``body`` with every credential replaced (see the module doc), and where it was."""
    found: list[str] = []
    scrubbed = _scrub(body, "$", token, found)
    assert isinstance(scrubbed, dict)
    return RecordedRequest(body=scrubbed, redacted=tuple(found))


def _scrub(value: Any, path: str, token: str, found: list[str]) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            where = f"{path}.{key}"
            if is_credential_name(str(key)) and item not in (None, "", {}, []):
                out[key] = REDACTED
                found.append(where)
            else:
                out[key] = _scrub(item, where, token, found)
        return out
    if isinstance(value, list):
        return [_scrub(item, f"{path}[{i}]", token, found) for i, item in enumerate(value)]
    if isinstance(value, str) and token and token in value:
        found.append(path)
        return value.replace(token, REDACTED)
    return value
