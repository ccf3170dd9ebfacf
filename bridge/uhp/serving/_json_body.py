"""Reading a request body defensively: a size limit enforced while the body arrives, and a
JSON parse that refuses what would break the app later (non-finite numbers, lone surrogates,
nesting deeper than a limit), each answered in the UHP error envelope before anything runs.

Why at parse time: a ``NaN`` or a lone surrogate parses fine in Python but cannot be written
back out as JSON (or as UTF-8), and a value nested hundreds deep makes every later
``deepcopy`` / ``json.dumps`` of the response recurse; the run would start and then fail where
nobody can answer the client.
"""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.requests import Request

from bridge.uhp.serving._envelope import UhpApiError, invalid_request

#: Default body limit (``POST`` bodies of UHP are small; a larger one is refused with 413).
MAX_BODY_BYTES = 1024 * 1024
#: Deepest nesting of objects and arrays a body may have (the top-level object is depth 1).
MAX_JSON_DEPTH = 64


def too_large(max_bytes: int) -> UhpApiError:
    return invalid_request(
        f"The request body is larger than {max_bytes} bytes.",
        code="request_too_large",
        status=413,
    )


async def read_limited(request: Request, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The body, refused with 413 as soon as it exceeds ``max_bytes``: a ``Content-Length``
    over the limit is refused before reading, and a chunked body (or a length that lies) is
    never held beyond the limit."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _check_values(value: Any, max_depth: int) -> None:
    """Depth and string checks over the parsed value, iteratively (no recursion to exhaust)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise invalid_request(
                    f"The request body nests deeper than {max_depth} levels.",
                    code="invalid_json",
                )
            if isinstance(item, dict):
                for key in item:
                    _check_text(key)
                pending.extend((v, depth + 1) for v in item.values())
            else:
                pending.extend((v, depth + 1) for v in item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_request(
            "The request body contains a lone surrogate (not valid Unicode).",
            code="invalid_json",
        ) from None


def parse_json(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``raw`` as strict JSON: UTF-8, finite numbers only, no lone surrogates, at most
    ``max_depth`` levels deep; anything else is a 400 ``invalid_json``."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        # ValueError covers bad UTF-8, bad JSON, NaN/Infinity/1e400 and over-long integers.
        raise invalid_request("The request body is not valid JSON.", code="invalid_json") from None
    _check_values(value, max_depth)
    return value
