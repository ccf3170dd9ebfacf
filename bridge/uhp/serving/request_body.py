"""Reading a UHP request body: one JSON object, its boolean flags, and what the kit needs from
a ``POST /v1/responses``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from bridge.uhp.serving.envelope import invalid_request
from bridge.uhp.serving.idempotency import idempotency_key, request_fingerprint


async def json_object(request: Request, *, empty_is_object: bool = False) -> dict[str, Any]:
    """The body as a JSON object; ``empty_is_object`` reads an empty body as ``{}``."""
    raw = await request.body()
    if not raw.strip():
        if empty_is_object:
            return {}
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    try:
        body = json.loads(raw)
    except ValueError:
        raise invalid_request("The request body is not valid JSON.", code="invalid_json") from None
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


@dataclass(frozen=True, slots=True)
class CreateRequest:
    """A ``POST /v1/responses`` as the kit reads it; the app validates the rest of ``body``."""

    body: dict[str, Any]
    stream: bool
    background: bool
    idempotency_key: str | None
    fingerprint: str  # of what the body asks to execute (see ``idempotency``)


async def read_create_request(request: Request, *, empty_is_object: bool = False) -> CreateRequest:
    """The body, its delivery flags and its ``Idempotency-Key`` with the body's fingerprint."""
    body = await json_object(request, empty_is_object=empty_is_object)
    return CreateRequest(
        body=body,
        stream=flag(body, "stream"),
        background=flag(body, "background"),
        idempotency_key=idempotency_key(request),
        fingerprint=request_fingerprint(body),
    )
