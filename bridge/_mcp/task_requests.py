"""The three ``tasks/*`` requests the bridge sends for one recorded handle, each in the
generation the handle was created under (the Tasks extension, or 2025-11-25 experimental
tasks). No ledger, no scheduling: callers decide when, and record what comes back."""

from __future__ import annotations

from typing import Any

import mcp_types

from bridge._ledger.reads.views import TaskView
from bridge._mcp import legacy_shapes as legacy_wire
from bridge._mcp.servers import ServerConnection
from bridge._mcp.wire.generations import TaskGeneration, generation_of
from bridge._mcp.wire.lean_get import lean_fetch, lean_session
from bridge._mcp.wire.shapes import (
    CancelTaskRequest,
    DetailedTask,
    GetTaskRequest,
    TaskIdParams,
    UpdateTaskParams,
    UpdateTaskRequest,
)


async def fetch_task(connection: ServerConnection, task: TaskView) -> DetailedTask:
    """Send ``tasks/get`` for one handle (in the generation it was created under)."""
    if generation_of(task) is TaskGeneration.EXPERIMENTAL_2025_11_25:
        return await legacy_wire.fetch_task(connection, task)
    session = await connection.session()
    config = connection.config
    request = GetTaskRequest(params=TaskIdParams(task_id=task.task_id))
    http = connection.http_client
    url = connection.parsed_url if config.lean_task_get else None
    if url is not None and http is not None and lean_session(session):
        return await lean_fetch(
            session,
            http,
            url,
            request,
            config.request_timeout_s,
            connection.lean_get_stats,
        )
    reply: DetailedTask = await session.send_request(
        request, DetailedTask, request_read_timeout_seconds=config.request_timeout_s
    )
    return reply


async def send_cancel(connection: ServerConnection, task: TaskView) -> None:
    """Send ``tasks/cancel`` (an empty ack means only that the request was taken)."""
    if generation_of(task) is TaskGeneration.EXPERIMENTAL_2025_11_25:
        return await legacy_wire.cancel_task(connection, task)
    session = await connection.session()
    await session.send_request(
        CancelTaskRequest(params=TaskIdParams(task_id=task.task_id)),
        mcp_types.Result,
        request_read_timeout_seconds=connection.config.request_timeout_s,
    )


async def deliver_answers(
    connection: ServerConnection, task: TaskView, responses: dict[str, Any]
) -> None:
    """Send ``tasks/update`` with answers keyed exactly as the server named the requests."""
    session = await connection.session()
    await session.send_request(
        UpdateTaskRequest(params=UpdateTaskParams(task_id=task.task_id, input_responses=responses)),
        mcp_types.Result,  # an empty ack
        request_read_timeout_seconds=connection.config.request_timeout_s,
    )
