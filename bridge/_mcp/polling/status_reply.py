"""Reading a ``tasks/get`` reply (or pushed task state): status and input requests."""

from __future__ import annotations

from typing import Any

from bridge._ledger.store import input_request_digest
from bridge._lifecycle import TaskStatus
from bridge._mcp.wire.shapes import DetailedTask


def parse_status(value: str) -> TaskStatus | None:
    """A status the bridge knows, or ``None`` for one it does not (an anomaly to report)."""
    try:
        return TaskStatus(value)
    except ValueError:
        return None


def input_requests(reply: DetailedTask) -> dict[str, dict[str, Any]]:
    """The outstanding ``inputRequests`` of an ``input_required`` reply, by key, reduced to
    ``method`` and ``params`` (entries that are not objects are dropped)."""
    requests: dict[str, dict[str, Any]] = {}
    for key, request in (reply.input_requests or {}).items():
        if isinstance(request, dict):
            requests[str(key)] = {
                "method": str(request.get("method", "")),
                "params": request.get("params") or {},
            }
    return requests


def request_digest(request: dict[str, Any]) -> str:
    """The digest the ledger dedups an input request by (same key, same request)."""
    return input_request_digest(request["method"], request["params"])
