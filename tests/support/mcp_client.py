"""A raw SDK client for checking servers directly, on the bridge's own Tasks wire types.

Tests that probe a server (not the bridge) use these instead of redefining the SEP-2663 shapes:
``bridge._mcp.wire.shapes`` and ``bridge._mcp.wire.extension`` already declare them on the SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bridge._mcp.wire.extension import TasksClientExtension
from bridge._mcp.wire.shapes import (
    CreateTaskResult,
    DetailedTask,
    GetTaskRequest,
    TaskIdParams,
    UpdateTaskParams,
    UpdateTaskRequest,
)


@asynccontextmanager
async def connect(
    url: str, token: str | None = None, *, tasks: bool = True, **options: Any
) -> AsyncIterator[Client]:
    """An SDK client declaring the tasks extension (or not), with an optional bearer token;
    ``options`` go to ``Client`` (``elicitation_callback``, ``mode``, …)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    http = create_mcp_http_client(headers=headers)
    extensions = [TasksClientExtension()] if tasks else []
    async with (
        http,
        Client(
            streamable_http_client(url, http_client=http), extensions=extensions, **options
        ) as client,
    ):
        yield client


async def start_task(client: Client, tool: str, arguments: dict[str, Any]) -> CreateTaskResult:
    result = await client.session.call_tool(tool, arguments, allow_claimed=True)
    assert isinstance(result, CreateTaskResult), result
    return result


async def get_task(client: Client, task_id: str) -> DetailedTask:
    return await client.session.send_request(
        GetTaskRequest(params=TaskIdParams(task_id=task_id)), DetailedTask
    )


async def update_task(client: Client, task_id: str, responses: dict[str, Any]) -> None:
    await client.session.send_request(
        UpdateTaskRequest(params=UpdateTaskParams(task_id=task_id, input_responses=responses)),
        mcp_types.Result,
    )
