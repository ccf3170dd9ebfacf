"""What a ``tools/call`` says about itself beyond the tool and its arguments: the outer UHP
response it belongs to and the caller's own idempotency key, from HTTP headers or ``_meta``.

- ``UHP-Response-Id: resp_…`` (and optionally ``UHP-Session-Id: hsess…``), or the ``_meta``
  keys :data:`RESPONSE_ID_META_KEY` / :data:`SESSION_ID_META_KEY`: record the call under that
  outer run instead of the client session's own run;
- ``Idempotency-Key: …`` (or ``_meta`` :data:`IDEMPOTENCY_KEY_META_KEY`): the same operation id
  as ``_meta`` :data:`OPERATION_ID_META_KEY` — the same key, tool and arguments again returns
  the recorded outcome; the same key with another tool or other arguments is refused.

Every value is validated (format, bounded length) before it reaches the ledger.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError

RESPONSE_ID_HEADER = "UHP-Response-Id"
SESSION_ID_HEADER = "UHP-Session-Id"
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
# The caller's name for one logical call: the same id (and tool and arguments) again returns
# what the first call recorded instead of calling upstream twice.
OPERATION_ID_META_KEY = "io.github.uhp-mcp-bridge/operationId"
IDEMPOTENCY_KEY_META_KEY = "io.github.uhp-mcp-bridge/idempotencyKey"
# Where a transport has no headers (stdio), the outer identity may come in ``_meta``.
RESPONSE_ID_META_KEY = "io.github.uhp-mcp-bridge/responseId"
SESSION_ID_META_KEY = "io.github.uhp-mcp-bridge/sessionId"

MAX_ID_CHARS = 200
_RESPONSE_ID = re.compile(r"^resp_[A-Za-z0-9_-]{1,195}$")
_SESSION_ID = re.compile(r"^hsess[A-Za-z0-9_-]{1,195}$")


def invalid_params(message: str) -> MCPError:
    return MCPError(code=mcp_types.INVALID_PARAMS, message=message)


@dataclass(frozen=True, slots=True)
class OuterIdentity:
    """The UHP response (and session) a request says it is part of."""

    response_id: str
    session_id: str | None


def outer_identity(meta: Any, headers: Mapping[str, str] | None) -> OuterIdentity | None:
    """The outer identity a request names (headers, or ``_meta`` where there are none, as over
    stdio), ``None`` without a response id."""
    response_id = _one_value(meta, headers, RESPONSE_ID_META_KEY, RESPONSE_ID_HEADER)
    session_id = _one_value(meta, headers, SESSION_ID_META_KEY, SESSION_ID_HEADER)
    if response_id is None:
        if session_id is not None:
            raise invalid_params(f"{SESSION_ID_HEADER} needs {RESPONSE_ID_HEADER}")
        return None
    if not _RESPONSE_ID.match(response_id):
        raise invalid_params(f"{RESPONSE_ID_HEADER} must be resp_ + [A-Za-z0-9_-] (<= 200)")
    if session_id is not None and not _SESSION_ID.match(session_id):
        raise invalid_params(f"{SESSION_ID_HEADER} must be hsess + [A-Za-z0-9_-] (<= 200)")
    return OuterIdentity(response_id, session_id)


def operation_id(meta: Any, headers: Mapping[str, str] | None) -> str | None:
    """The caller's operation id: ``_meta`` operation id, ``Idempotency-Key`` header or
    ``_meta`` idempotency key — one namespace; two of them that disagree are refused."""
    by_meta = _one_value(meta, None, OPERATION_ID_META_KEY, None)
    by_key = _one_value(meta, headers, IDEMPOTENCY_KEY_META_KEY, IDEMPOTENCY_KEY_HEADER)
    if by_meta is not None and by_key is not None and by_meta != by_key:
        raise invalid_params("the operation id and the idempotency key of a call differ")
    return by_meta if by_meta is not None else by_key


def _one_value(
    meta: Any, headers: Mapping[str, str] | None, meta_key: str, header: str | None
) -> str | None:
    """One request field given as a ``_meta`` key and/or an HTTP header (which must agree),
    checked to be 1-200 printable characters."""
    given = {
        f"_meta {meta_key!r}": meta.get(meta_key) if isinstance(meta, dict) else None,
        f"header {header}": (headers or {}).get(header.lower()) if header else None,
    }
    values: set[str] = set()
    for where, value in given.items():
        if value is None:
            continue
        if not _usable_key(value):
            raise invalid_params(f"{where} must be 1-{MAX_ID_CHARS} printable characters")
        values.add(value)
    if len(values) > 1:
        raise invalid_params(f"_meta {meta_key!r} and header {header} differ")
    return values.pop() if values else None


def _usable_key(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and value.isprintable()
