"""Server side of the Tasks extension's push, for the in-repo servers built on the official SDK.

The SDK 2.3 server serves ``subscriptions/listen``, but its ``ListenHandler`` knows only the
core change notifications and leaves ``taskIds`` out of the acknowledgement; no server at
hand pushes task states (fastmcp-tasks 4.1.4 removed its push). :class:`TaskPushListeners` is
a ``ServerMiddleware`` that serves a listen naming ``taskIds``: it acknowledges the ids the
server knows (``notifications/subscriptions/acknowledged``, the SDK's ``SubscriptionFilter``
with the ``taskIds`` key merged), then sends every frame given to :meth:`push` for those
ids as ``notifications/tasks``, stamped with the subscription id. A listen without
``taskIds`` goes on to the SDK's own handler. Used by ``bench/task_tool_server.py --push``
and ``tests/servers/push_tasks_server.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal, NoReturn

import anyio
import mcp_types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

from bridge._mcp.wire.shapes import TASKS_EXTENSION

TASKS = TASKS_EXTENSION


def missing_capability() -> NoReturn:
    """The error a server answers a client that did not declare the Tasks extension."""
    data = mcp_types.MissingRequiredClientCapabilityErrorData(
        required_capabilities=mcp_types.ClientCapabilities(extensions={TASKS: {}})
    )
    raise MCPError(
        code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"Client did not declare required extension {TASKS!r}",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


class TaskStatusParams(mcp_types.NotificationParams):
    model_config = ConfigDict(extra="allow")


class TaskStatusNotification(
    mcp_types.Notification[TaskStatusParams, Literal["notifications/tasks"]]
):
    method: Literal["notifications/tasks"] = "notifications/tasks"
    params: TaskStatusParams


class TaskPushListeners:
    """The open listen streams naming task ids, and what is pushed to them."""

    def __init__(self, known: Callable[[str], bool], *, buffer: int = 1024) -> None:
        self._known = known  # whether a task id names a task of this server
        self._buffer = buffer
        self._streams: dict[object, tuple[frozenset[str], Any]] = {}
        self.listens = 0
        self.pushes = 0
        self.refuse_until = 0.0  # time.monotonic(): listens are refused until then
        self.ack_delay_s = 0.0  # a busy server: each acknowledgement leaves this much later

    def push(self, task_id: str, frame: dict[str, Any]) -> None:
        """Send a task's full state (what ``tasks/get`` answers now) to every stream naming it."""
        for ids, send in list(self._streams.values()):
            if task_id in ids:
                self.pushes += 1
                send.send_nowait(frame)

    def named(self) -> int:
        """How many task ids the open streams name."""
        return len(set().union(*(ids for ids, _ in self._streams.values())))

    async def middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        params = ctx.params or {}
        notifications = params.get("notifications") or {}
        wanted = notifications.get("taskIds") if isinstance(notifications, dict) else None
        if ctx.method != "subscriptions/listen" or ctx.request_id is None or not wanted:
            return await call_next(ctx)
        request_meta = params.get("_meta") or {}
        capabilities = request_meta.get(mcp_types.CLIENT_CAPABILITIES_META_KEY) or {}
        declared = capabilities.get("extensions") or {}
        if TASKS not in declared:
            missing_capability()
        if time.monotonic() < self.refuse_until:
            raise MCPError(code=mcp_types.INTERNAL_ERROR, message="listening paused")
        if self.ack_delay_s:
            await anyio.sleep(self.ack_delay_s)
        honored = sorted(i for i in wanted if isinstance(i, str) and self._known(i))
        meta = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](self._buffer)
        key = object()
        self._streams[key] = (frozenset(honored), send)
        self.listens += 1
        try:
            ack = mcp_types.SubscriptionsAcknowledgedNotificationParams(
                notifications=mcp_types.SubscriptionFilter(taskIds=honored), _meta=meta
            )
            await ctx.session.send_notification(
                mcp_types.SubscriptionsAcknowledgedNotification(params=ack),
                related_request_id=ctx.request_id,
            )
            async for frame in receive:
                pushed = TaskStatusNotification(params=TaskStatusParams(**frame, _meta=meta))
                await ctx.session.send_notification(
                    pushed,  # type: ignore[arg-type]
                    related_request_id=ctx.request_id,
                )
        finally:
            self._streams.pop(key, None)
            send.close()
        return mcp_types.SubscriptionsListenResult(_meta=meta)
