"""Reading a UHP request body: one JSON object, and its boolean flags."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from bridge.uhp.serving.envelope import invalid_request


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
