"""The bounds on what a server may ask: open input requests per task (or per MRTR leg) and the
size of one request. What is beyond them is never stored whole: it becomes an anomaly the
operator sees (``Bridge.attention``), so one reply cannot fill the ledger or the inbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge._ids import canonical_json, sha256_hex
from bridge._ledger.outcome import PREVIEW_CHARS, TRUNCATION_MARKER

#: At most this many input requests of one task wait at once (one MRTR leg: this many).
MAX_OPEN_INPUTS_PER_TASK = 32
#: A request's parameters (its question, its schema) larger than this are kept as a marker.
MAX_QUESTION_BYTES = 64 * 1024

TOO_MANY = "too_many_input_requests"
TOO_LARGE = "input_request_too_large"


@dataclass(frozen=True, slots=True)
class BoundedParams:
    params: Any  # what is stored and surfaced: the request's own, or a truncation marker
    too_large: bool
    original_bytes: int


def bound_params(params: Any) -> BoundedParams:
    """A request's parameters as stored: whole up to :data:`MAX_QUESTION_BYTES`, else the
    truncation marker outcomes use (size, SHA-256, a preview), never a broken prefix."""
    encoded = canonical_json(params)
    if len(encoded) <= MAX_QUESTION_BYTES:
        return BoundedParams(params, False, len(encoded))
    marker = {
        TRUNCATION_MARKER: True,
        "original_bytes": len(encoded),
        "sha256": sha256_hex(encoded),
        "preview": encoded[:PREVIEW_CHARS].decode("utf-8", errors="ignore"),
        "message": f"[question too large: {len(encoded)} bytes; decline or cancel it]",
    }
    return BoundedParams(marker, True, len(encoded))


def too_large_detail(input_ref: str, size: int) -> str:
    return (
        f"input request {input_ref} is {size} bytes (limit {MAX_QUESTION_BYTES}): "
        "kept as a marker, not shown whole"
    )


def too_many_detail(skipped: int) -> str:
    return (
        f"{skipped} more input request(s) than the {MAX_OPEN_INPUTS_PER_TASK} that may wait "
        "at once: not recorded until earlier ones are answered"
    )
