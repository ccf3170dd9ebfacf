"""Reading a UHP request body: one JSON object, its boolean flags, and what the kit needs from
a ``POST /v1/responses``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from bridge.uhp.serving._envelope import invalid_request
from bridge.uhp.serving._idempotency import idempotency_key, request_fingerprint
from bridge.uhp.serving._json_body import MAX_BODY_BYTES, parse_json, read_limited

#: Largest integer budget (``timeout_seconds``, ``max_step``) a request may ask for: beyond it
#: a timer or a counter would overflow, and no real request needs more than ~31 years.
MAX_BUDGET = 10**9


async def json_object(
    request: Request, *, empty_is_object: bool = False, max_bytes: int = MAX_BODY_BYTES
) -> dict[str, Any]:
    """The body as a JSON object (strict, see ``json_body``; over ``max_bytes`` is a 413);
    ``empty_is_object`` reads an empty body as ``{}``."""
    raw = await read_limited(request, max_bytes)
    if not raw.strip():
        if empty_is_object:
            return {}
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    return body


def flag(body: dict[str, Any], name: str) -> bool:
    """A boolean field (``stream``, ``background``); absent or null is false."""
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid_request(f"'{name}' must be a boolean.", name)
    return value


def budget(body: dict[str, Any], name: str, maximum: int = MAX_BUDGET) -> int | None:
    """A non-negative integer field of at most ``maximum`` (absent or null: None)."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise invalid_request(f"'{name}' must be an integer from 0 to {maximum}.", name)
    return value


@dataclass(frozen=True, slots=True)
class CreateRequest:
    """A ``POST /v1/responses`` as the kit reads it; the app validates the rest of ``body``."""

    body: dict[str, Any]
    stream: bool
    background: bool
    idempotency_key: str | None
    fingerprint: str  # of what the body asks to execute (see ``idempotency``)


async def read_create_request(
    request: Request, *, empty_is_object: bool = False, max_bytes: int = MAX_BODY_BYTES
) -> CreateRequest:
    """The body, its delivery flags and its ``Idempotency-Key`` with the body's fingerprint."""
    key = idempotency_key(request)  # a bad header is refused before the body is read
    body = await json_object(request, empty_is_object=empty_is_object, max_bytes=max_bytes)
    return CreateRequest(
        body=body,
        stream=flag(body, "stream"),
        background=flag(body, "background"),
        idempotency_key=key,
        fingerprint=request_fingerprint(body),
    )
