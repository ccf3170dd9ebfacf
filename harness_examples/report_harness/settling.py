"""Ending a response for good: the terminal record, built so that it can always be written,
and the write itself, retried with a bounded backoff.

A response whose terminal write fails must not become a zombie (``in_progress`` forever with
waiting clients). Two kinds of failure are handled apart:

* the response cannot be serialised (``deepcopy`` / ``json.dumps`` fail on hostile content):
  retrying would fail the same way, so a minimal ``failed`` response is written instead;
* the store refuses the write (locked, read-only, disk full): it is retried, backing off up to
  a deadline; past it the waiting requests are released (the run was accepted, so they are
  told it is still in progress) and the write goes on being retried until it lands, the
  process stops (the next start resumes the run), or the store takes writes again. The caller
  updates its memory only once the write has committed.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bridge.uhp.serving import settle_response

log = logging.getLogger("report_harness")

FIRST_RETRY_SECONDS = 0.05
MAX_RETRY_SECONDS = 2.0
NOT_SERIALISABLE = {
    "type": "harness_error",
    "code": "response_not_serialisable",
    "message": "The response could not be stored as JSON; its output is not kept.",
}


@dataclass(frozen=True, slots=True)
class TerminalRecord:
    """The settled response and its terminal event, as the JSON text to store."""

    body: dict[str, Any]
    status: str
    event_type: str
    event_json: str
    body_json: str


def _record(body: dict[str, Any], status: str, error: dict[str, Any] | None, seq: int) -> Any:
    final = copy.deepcopy(body)
    event_type = settle_response(final, status, error)
    event = {"type": event_type, "sequence_number": seq, "response": final}
    return TerminalRecord(final, status, event_type, json.dumps(event), json.dumps(final))


def _minimal(body: dict[str, Any]) -> dict[str, Any]:
    """What is left of ``body`` when it cannot be serialised: its scalar identity only."""
    keep = ("id", "object", "created_at", "previous_response_id", "model", "store")
    out = {k: body[k] for k in keep if isinstance(body.get(k), str | int | bool | None)}
    meta = body.get("metadata")
    ids = ("session_id", "harness_id")
    metadata = {k: meta[k] for k in ids if isinstance(meta, dict) and isinstance(meta.get(k), str)}
    return {
        **out,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
        "metadata": metadata,
    }


def terminal_record(
    body: dict[str, Any], status: str, error: dict[str, Any] | None, seq: int
) -> TerminalRecord:
    """``body`` settled in ``status`` as event ``seq``; never raises (``body`` is unchanged)."""
    try:
        record: TerminalRecord = _record(body, status, error, seq)
        return record
    except Exception as exc:  # RecursionError, unserialisable values, ...
        log.error("response %s cannot be serialised (%s)", body.get("id"), type(exc).__name__)
        fallback: TerminalRecord = _record(_minimal(body), "failed", NOT_SERIALISABLE, seq)
        return fallback


async def write_with_retry(
    write: Callable[[], Awaitable[None]], *, deadline_s: float, what: str
) -> bool:
    """Run ``write`` until it succeeds (True) or ``deadline_s`` has passed (False), waiting
    ``FIRST_RETRY_SECONDS`` after the first failure, doubling up to ``MAX_RETRY_SECONDS``."""
    give_up_at = time.monotonic() + deadline_s
    pause = FIRST_RETRY_SECONDS
    while True:
        try:
            await write()
            return True
        except Exception as exc:
            if time.monotonic() + pause > give_up_at:
                log.error("%s: not written, giving up (%s)", what, type(exc).__name__)
                return False
            log.warning("%s: write failed (%s), retrying", what, type(exc).__name__)
        await asyncio.sleep(pause)
        pause = min(pause * 2, MAX_RETRY_SECONDS)


async def write_until_stored(write: Callable[[], Awaitable[None]], *, what: str) -> None:
    """Run ``write`` until it succeeds, backing off to ``MAX_RETRY_SECONDS`` between tries;
    only cancelling the caller (the process stopping) ends it sooner. Logged once when it
    starts and once when the write lands: a full disk is one fault, not one per retry."""
    started = time.monotonic()
    log.error("%s: the store refuses it; retried until it takes writes again", what)
    pause = FIRST_RETRY_SECONDS
    while True:
        await asyncio.sleep(pause)
        pause = min(pause * 2, MAX_RETRY_SECONDS)
        try:
            await write()
        except Exception as exc:
            log.debug("%s: still refused (%s)", what, type(exc).__name__)
            continue
        log.warning("%s: written after %.1f s", what, time.monotonic() - started)
        return
