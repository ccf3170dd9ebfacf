"""The Tasks client extension: declares ``io.modelcontextprotocol/tasks`` on every request,
claims ``resultType: "task"`` so a ``tools/call`` may return a ``CreateTaskResult``, and (when
given a sink) observes ``notifications/tasks`` pushed on a ``subscriptions/listen`` stream."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types
from mcp.client import ClaimContext, ClientExtension, NotificationBinding, ResultClaim

from bridge._mcp.wire.shapes import (
    TASK_STATUS_NOTIFICATION,
    TASKS_EXTENSION,
    CreateTaskResult,
    TaskStatusPush,
)


async def _refuse_implicit_polling(
    created: CreateTaskResult, context: ClaimContext
) -> mcp_types.CallToolResult:
    # The bridge always calls with allow_claimed=True and keeps the handle itself; a resolver
    # that polled here would hide the handle from the ledger.
    raise RuntimeError("the bridge never resolves a task implicitly; use allow_claimed=True")


TaskPushSink = Callable[[TaskStatusPush], Awaitable[None]]


class TasksClientExtension(ClientExtension):
    identifier = TASKS_EXTENSION

    def __init__(self, on_task_status: TaskPushSink | None = None) -> None:
        self._on_task_status = on_task_status

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (
            ResultClaim(
                result_type="task", model=CreateTaskResult, resolve=_refuse_implicit_polling
            ),
        )

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        if self._on_task_status is None:
            return ()
        return (
            NotificationBinding(
                method=TASK_STATUS_NOTIFICATION,
                params_type=TaskStatusPush,
                handler=self._on_task_status,
            ),
        )
