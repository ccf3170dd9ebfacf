"""The Tasks-extension body of a bridge-issued handle (``tasks/get``, ``CreateTaskResult``),
read from the ledger only: the handle replaces the upstream ``taskId``, which never leaves
the ledger."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bridge._ledger.reads.views import TaskView
from bridge._lifecycle import TaskStatus
from bridge._outcomes import InputRequest

# Offered when the upstream gave none: the ledger keeps the record, the scheduler its watch.
DEFAULT_TTL_MS = 24 * 3600 * 1000
DEFAULT_POLL_INTERVAL_MS = 1000
INTERNAL_ERROR = -32603


def _iso(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def task_body(handle: str, task: TaskView, inputs: list[InputRequest]) -> dict[str, Any]:
    """The task as a client of the gateway sees it. A handle declared lost is reported
    ``failed`` with an error saying its outcome is unknown (never a made-up result)."""
    lost = task.lost_reason is not None and task.terminal_at_ms is None
    status = TaskStatus.FAILED.value if lost else task.status.value
    body: dict[str, Any] = {
        "taskId": handle,
        "status": status,
        "createdAt": _iso(task.created_at_ms),
        "lastUpdatedAt": _iso(task.updated_at_ms),
        "ttlMs": task.ttl_ms if task.ttl_ms is not None else DEFAULT_TTL_MS,
        "pollIntervalMs": task.poll_interval_ms or DEFAULT_POLL_INTERVAL_MS,
    }
    if lost:  # the server's last message described a status the task is no longer known in
        assert task.lost_reason is not None
        body["statusMessage"] = f"lost ({task.lost_reason.value}): outcome unknown"
        body["error"] = {
            "code": INTERNAL_ERROR,
            "message": f"task lost ({task.lost_reason.value}); its outcome is unknown",
        }
        return body
    if task.status_message:  # kept by the ledger for the status it came with only
        body["statusMessage"] = task.status_message
    if task.terminal_at_ms is not None:
        if task.result is not None:
            body["result"] = task.result
        if task.error is not None:
            body["error"] = task.error
    if task.status is TaskStatus.INPUT_REQUIRED and inputs:
        body["inputRequests"] = {
            i.input_ref: {"method": i.method, "params": i.params} for i in inputs
        }
    return body
