"""Reading a ``tasks/get`` reply (or pushed task state): status and input requests."""

from __future__ import annotations

from typing import Any

from bridge._ledger.reads.views import TaskView
from bridge._ledger.store import input_request_digest
from bridge._lifecycle import TaskStatus
from bridge._mcp.wire.shapes import DetailedTask
from bridge._redaction import scrub_task_id


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


def reply_is_unchanged(
    task: TaskView,
    input_digests: dict[str, str],
    reply: DetailedTask,
    status: TaskStatus,
    requests: dict[str, dict[str, Any]] | None,
) -> bool:
    """Whether a poll's reply says nothing the ledger does not hold already (then nothing is
    written): same open status, message, interval, TTL and input requests."""
    if status is not task.status or status.is_terminal:
        return False
    message = reply.status_message
    if message is not None and scrub_task_id(message, task.task_id, task.ref) != (
        task.status_message
    ):
        return False  # (stored scrubbed: compared scrubbed, or every poll would rewrite it)
    if reply.poll_interval_ms is not None and reply.poll_interval_ms != task.poll_interval_ms:
        return False
    if reply.ttl_ms is not None and reply.ttl_ms != task.ttl_ms:
        return False
    for key, request in (requests or {}).items():
        if input_digests.get(key) != request_digest(request):
            return False  # a new key, or a known key with another payload (an anomaly)
    return True
