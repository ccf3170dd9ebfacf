"""The Tasks client extension: declares ``io.modelcontextprotocol/tasks`` on every request and
claims ``resultType: "task"`` so a ``tools/call`` may return a ``CreateTaskResult``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mcp_types
from mcp.client import ClaimContext, ClientExtension, ResultClaim

from bridge.mcp.wire import TASKS_EXTENSION, CreateTaskResult


async def _refuse_implicit_polling(
    created: CreateTaskResult, context: ClaimContext
) -> mcp_types.CallToolResult:
    # The bridge always calls with allow_claimed=True and keeps the handle itself; a resolver
    # that polled here would hide the handle from the ledger.
    raise RuntimeError("the bridge never resolves a task implicitly; use allow_claimed=True")


class TasksClientExtension(ClientExtension):
    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (
            ResultClaim(
                result_type="task", model=CreateTaskResult, resolve=_refuse_implicit_polling
            ),
        )
