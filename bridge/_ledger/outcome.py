"""Size-bounded storage of results and errors, with an explicit truncation marker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge._ids import canonical_json, sha256_hex

DEFAULT_MAX_OUTCOME_BYTES = 1_048_576
PREVIEW_CHARS = 2_048
TRUNCATION_MARKER = "bridge.truncated"


@dataclass(frozen=True, slots=True)
class BoundedJson:
    text: str  # always valid JSON
    truncated: bool
    original_bytes: int


def bound_json(value: Any, max_bytes: int = DEFAULT_MAX_OUTCOME_BYTES) -> BoundedJson:
    """Encode ``value``; past ``max_bytes`` store a marker object instead of a broken prefix.

    The marker keeps the original size, its SHA-256 and a text preview, so a reader can tell
    a truncated outcome from a real one and can verify a full copy obtained elsewhere.
    """
    encoded = canonical_json(value)
    if len(encoded) <= max_bytes:
        return BoundedJson(encoded.decode("utf-8"), False, len(encoded))
    preview = encoded[:PREVIEW_CHARS].decode("utf-8", errors="ignore")
    marker = {
        TRUNCATION_MARKER: True,
        "original_bytes": len(encoded),
        "sha256": sha256_hex(encoded),
        "preview": preview,
    }
    return BoundedJson(canonical_json(marker).decode("utf-8"), True, len(encoded))


def is_truncation_marker(value: Any) -> bool:
    return isinstance(value, dict) and value.get(TRUNCATION_MARKER) is True
