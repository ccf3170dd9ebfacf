"""Wire shapes of the MCP Tasks extension (SEP-2663, schema 2026-07-28) on the SDK's models.

The ``mcp`` SDK 2.3 ships only the superseded 2025-11-25 task types, so the current flat shapes
are declared here on the SDK's own base classes: requests carry ``name_param = "taskId"``, which
makes the SDK send ``Mcp-Name: <taskId>`` (and ``Mcp-Method``) on Streamable HTTP.
"""

from __future__ import annotations

from typing import Any, Literal

import mcp_types
from pydantic import ConfigDict

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# A draft (the Agents WG's "related task IDs", not in the 2026-07-28 schema): a request names
# earlier tasks it follows on, so the server can connect them. Sent only where a server opted
# in (``McpServerConfig.related_task_ids``), only to the server that issued those ids.
RELATED_TASK_IDS_META_KEY = "io.modelcontextprotocol/relatedTaskIds"
MAX_RELATED_TASK_IDS = 16  # the most recent; keeps the request's _meta bounded

INVALID_PARAMS = -32602  # unknown or expired taskId
INTERNAL_ERROR = -32603
PARSE_ERROR = -32700  # also made up by the SDK when a reply body is not JSON
INVALID_REQUEST = -32600
REQUEST_TIMEOUT = mcp_types.REQUEST_TIMEOUT  # the SDK gave up waiting for the reply
# Codes the SDK raises locally when the transport gave no answer (never sent by a server).
TRANSPORT_CODES = frozenset({mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT})


class CreateTaskResult(mcp_types.Result):
    """``tools/call`` answered with a durable task handle instead of a result (flat shape)."""

    model_config = ConfigDict(extra="allow")

    result_type: Literal["task"]
    task_id: str
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    status_message: str | None = None
    # Not in the CreateTaskResult schema (Result & Task), but Result is open: a server that
    # creates a task already terminal may inline its outcome as tasks/get would.
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class DetailedTask(mcp_types.Result):
    """The answer to ``tasks/get``. Status is checked by the caller, so an unknown status is
    reported as a malformed reply rather than failing deep inside the SDK."""

    model_config = ConfigDict(extra="allow")

    result_type: str | None = None
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class TaskIdParams(mcp_types.RequestParams):
    task_id: str


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any]


class GetTaskRequest(mcp_types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class UpdateTaskRequest(mcp_types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class CancelTaskRequest(mcp_types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


TASK_STATUS_NOTIFICATION = "notifications/tasks"


class TaskStatusPush(mcp_types.NotificationParams):
    """The params of a ``notifications/tasks`` frame, accepted as sent: the bridge checks
    them itself (:mod:`bridge._mcp.polling.push`), so a malformed push is reported, not dropped by
    the SDK's validation before anyone sees it."""

    model_config = ConfigDict(extra="allow")


def with_related_task_ids(
    meta: dict[str, Any] | None, task_ids: list[str]
) -> dict[str, Any] | None:
    """``meta`` plus :data:`RELATED_TASK_IDS_META_KEY` naming the last of ``task_ids`` (oldest
    first); unchanged when there are none."""
    if not task_ids:
        return meta
    return {**(meta or {}), RELATED_TASK_IDS_META_KEY: task_ids[-MAX_RELATED_TASK_IDS:]}
