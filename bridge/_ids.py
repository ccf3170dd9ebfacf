"""Bridge-local references and canonical digests.

A *reference* is the opaque, bridge-local name of a ledger record. It is what leaves the
ledger in events, logs and traces; the raw MCP ``taskId`` (which may act as a bearer handle)
never does.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

RUN_PREFIX = "run_"
DISPATCH_PREFIX = "op_"
TASK_PREFIX = "tk_"
INPUT_PREFIX = "in_"


def new_ref(prefix: str) -> str:
    """A fresh opaque reference: prefix + 128 random bits, URL-safe."""
    return prefix + secrets.token_urlsafe(16)


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON encoding: sorted keys, no insignificant whitespace, UTF-8.

    Follows the spirit of RFC 8785 (JCS) for the JSON that tool arguments use in practice;
    number formatting is Python's, which is stable for ints and round-trips floats.
    NaN and infinities are rejected: they are not JSON.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_arguments(arguments: Any) -> str:
    """SHA-256 of the canonical JSON of a tool call's arguments (hex)."""
    return sha256_hex(canonical_json(arguments if arguments is not None else {}))


def is_call_ref(ref: str) -> bool:
    """Does ``ref`` name a dispatch (a call, ``op_…``) rather than a task?"""
    return ref.startswith(DISPATCH_PREFIX)
