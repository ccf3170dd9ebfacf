"""The Response object a server creates and finishes (lifecycle chapter).

``usage`` starts as null (never a fabricated zero), terminal states never change, and the
partial output of a task that did not complete is kept, its open items closed ``incomplete``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

from bridge.uhp.serving._event_log import TERMINAL_EVENT_FOR_STATUS, TERMINAL_STATUSES


def new_id(prefix: str) -> str:
    """An opaque id with its UHP prefix (``resp_``, ``hsess``, ``msg_``, ...)."""
    return prefix + secrets.token_hex(12)


#: Request fields the tasks chapter reserves (§1.4): accepted, never acted on, always named.
RESERVED_FIELDS = frozenset({"tools", "include"})


def ignored_fields(body: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    """The top-level body fields this server does not act on (``metadata.ignored_fields``):
    every field not in ``known``, and the reserved ones whatever ``known`` says."""
    return sorted(set(body) - (set(known) - RESERVED_FIELDS))


def new_response(
    response_id: str,
    *,
    model: str,
    metadata: dict[str, Any],
    previous_response_id: str | None,
) -> dict[str, Any]:
    """A Response ``in_progress`` with no output yet; ``metadata`` carries ``session_id``."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "previous_response_id": previous_response_id,
        "model": model,
        "output": [],
        "store": True,
        "usage": None,
        "metadata": metadata,
    }


def settle_response(
    response: dict[str, Any], status: str, error: dict[str, Any] | None = None
) -> str:
    """Put ``response`` in terminal ``status``; items still in progress end ``incomplete``.

    ``error`` is kept only for ``failed``: a cancelled task is never reported as failed.
    Returns the type of the terminal event that carries the settled response.
    """
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"{status!r} is not a terminal status")
    for item in response["output"]:
        if item.get("status") == "in_progress":
            item["status"] = "incomplete"
    response["status"] = status
    response["error"] = error if status == "failed" else None
    return TERMINAL_EVENT_FOR_STATUS[status]


def new_message_item() -> dict[str, Any]:
    """An assistant ``message`` output item, in progress, with no content yet."""
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }


def new_text_part() -> dict[str, Any]:
    """An empty ``output_text`` content part (its text grows with each delta)."""
    return {"type": "output_text", "text": "", "annotations": []}
