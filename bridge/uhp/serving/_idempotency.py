"""``Idempotency-Key`` on ``POST /v1/responses``: a repeated key returns the first request's
result and never starts a second execution.

What the kit stores and what the app stores
-------------------------------------------
* The kit defines the record a key maps to, :class:`KeyRecord`: the id of the response the
  first request created and a fingerprint of that request's body. :class:`MemoryKeyStore`
  holds these records in process (for servers whose state is in memory anyway).
* The app stores the response itself, and it stores the key record *together with* the
  response it creates (one transaction in a durable app, no ``await`` in between in memory),
  so that two requests with one key can never both create. Answering a replay (the stored
  response, a stream of its log, or waiting for it while it runs) is the app's too.

What the kit decides: :func:`replayed_response_id` says whether a request is a replay. The
same key with the same body (delivery flags aside: ``stream`` and ``background`` only choose
how the answer is delivered) is a replay; the same key with a different body is refused with
``422 idempotency_key_reused`` (as the IETF Idempotency-Key draft does), never answered with
the other request's result. Keys are scoped to the principal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from bridge.uhp.serving._envelope import UhpApiError, invalid_request

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
#: Body fields that choose how the answer is delivered, not what is executed.
DELIVERY_FIELDS = frozenset({"stream", "background"})


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What an idempotency key maps to."""

    response_id: str
    fingerprint: str


def idempotency_key(request: Request) -> str | None:
    """The request's key, or None; an empty or oversized key is refused."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not key.strip() or len(key) > MAX_KEY_LENGTH:
        raise invalid_request(
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} characters.", HEADER, code="invalid_value"
        )
    return key


def request_fingerprint(
    body: dict[str, Any], delivery_fields: Iterable[str] = DELIVERY_FIELDS
) -> str:
    """A digest of what the request asks to execute (canonical JSON, delivery flags left out)."""
    skip = frozenset(delivery_fields)
    work = {k: v for k, v in body.items() if k not in skip}
    canonical = json.dumps(work, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def replayed_response_id(record: KeyRecord | None, fingerprint: str) -> str | None:
    """The response a repeated key answers with, or None for a first request."""
    if record is None:
        return None
    if record.fingerprint != fingerprint:
        raise UhpApiError(
            422,
            "invalid_request_error",
            "idempotency_key_reused",
            f"This {HEADER} was first used with a different request body.",
            param=HEADER,
        )
    return record.response_id


class MemoryKeyStore:
    """Key records in process, per principal."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], KeyRecord] = {}

    def get(self, principal: str, key: str) -> KeyRecord | None:
        return self._records.get((principal, key))

    def record(self, principal: str, key: str, record: KeyRecord) -> None:
        self._records.setdefault((principal, key), record)
