"""Pushed task states: ``subscriptions/listen`` streams naming the handles watched on a server.

The server pushes ``notifications/tasks`` (the full task, as ``tasks/get`` would answer) for the
task ids a listen names. This module keeps such streams open to each server that advertises
support (at most :attr:`PushConfig.max_task_ids` handles, oldest first) and hands every pushed
state to the scheduler's poll-reply path (:meth:`PollScheduler.observe_pushed`): the same
checks, write-ahead and events, so a push only ever makes an observation *earlier*. Polling
drops to a backstop while an acknowledged stream names a handle, never stops.

New handles get a stream of their own and a stream is closed only once it names no watched
handle, because closing one loses whatever push is already on its way over it. The rules (who
gets a listen, merges at :attr:`PushConfig.max_streams`, failure and backoff, hostile pushes,
the SDK parts used) are in docs/mcp-side.md, "Push updates". Raw task ids never leave this
module's routing table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types
from anyio.abc import TaskGroup
from mcp.client.session import IncomingMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from bridge._config import PushConfig
from bridge._ledger.reads.views import TaskView
from bridge._lifecycle import TaskStatus
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._mcp.servers import PushHooks, ServerConnection, ServerInfo, ServerPool
from bridge._mcp.wire.shapes import TASKS_EXTENSION, DetailedTask, TaskStatusPush
from bridge._mcp.wire.task_ids import task_id_problem

log = logging.getLogger(__name__)

# Fields a status requires on a DetailedTask (the schema's per-status shapes).
_REQUIRED_FOR = {
    TaskStatus.COMPLETED: "result",
    TaskStatus.FAILED: "error",
    TaskStatus.INPUT_REQUIRED: "input_requests",
}


@dataclass(slots=True)
class PushStats:
    listens: int = 0  # streams acknowledged with at least one task id honoured
    merges: int = 0  # times streams were merged into a new one (max_streams reached)
    lost: int = 0  # streams that failed to open or ended without being closed by us
    applied: int = 0  # pushed states fed into the observation path
    rejected: int = 0  # malformed pushes about a watched task
    ignored: int = 0  # pushes naming no subscribed, watched task
    unsupported: set[str] = field(default_factory=set)  # servers found not to push


@dataclass(eq=False, slots=True)
class _Stream:
    ids: frozenset[str]
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    acked: anyio.Event = field(default_factory=anyio.Event)
    honored: frozenset[str] | None = None
    closing: bool = False  # closed by us: its end is not a loss
    ended: bool = False

    def close(self) -> None:
        self.closing = True
        self.scope.cancel()


@dataclass(eq=False, slots=True)
class _ServerPush:
    name: str
    endpoint: str
    changed: anyio.Event = field(default_factory=anyio.Event)
    routes: dict[str, list[str]] = field(default_factory=dict)  # task id -> task refs
    streams: list[_Stream] = field(default_factory=list)  # acknowledged, open
    pending: _Stream | None = None
    covered: frozenset[str] = frozenset()  # task refs an open stream honours
    failures: int = 0
    refused_by: int | None = None  # id() of the session whose server honoured no task id

    def honoured_refs(self, streams: list[_Stream] | None = None) -> frozenset[str]:
        """The watched task refs the server honoured on ``streams`` (default: all open)."""
        return frozenset(
            ref
            for s in (self.streams if streams is None else streams)
            for i in s.honored or ()
            for ref in self.routes.get(i, ())
        )


class _ListenFailed(Exception):
    pass


class PushUpdates:
    """Keeps each push-capable server's listen stream in step with the scheduler's handles."""

    def __init__(
        self,
        scheduler: PollScheduler,
        pool: ServerPool,
        task_group: TaskGroup,
        config: PushConfig | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._pool = pool
        self._tg = task_group
        self.config = config or PushConfig()
        self.stats = PushStats()
        self._servers: dict[str, _ServerPush] = {}
        pool.push_hooks = PushHooks(self._on_task_status, self._on_message)
        scheduler.on_watch_changed = self._watch_changed

    # -- what the scheduler and the connections call ------------------------------------
    def _watch_changed(self, endpoint: str) -> None:
        config = self._pool.config_for_endpoint(endpoint)
        if config is None or not config.push_updates:
            return
        state = self._servers.get(config.name)
        if state is None:
            state = self._servers[config.name] = _ServerPush(config.name, endpoint)
            self._tg.start_soon(self._keep_in_step, state)
        state.changed.set()

    async def _on_message(self, server: str, message: IncomingMessage) -> None:
        if not isinstance(message, mcp_types.SubscriptionsAcknowledgedNotification):
            return
        state = self._servers.get(server)
        stream = None if state is None else state.pending
        if stream is None or stream.acked.is_set():
            return  # not an acknowledgement of a stream this module is opening
        honored = (message.params.notifications.model_extra or {}).get("taskIds") or []
        stream.honored = frozenset(i for i in honored if isinstance(i, str)) & stream.ids
        stream.acked.set()

    async def _on_task_status(self, server: str, params: TaskStatusPush) -> None:
        try:
            await self._route(server, params)
        except Exception as exc:  # a push must never break the SDK's notification delivery
            log.warning("a task push from %s failed: %s", server, type(exc).__name__)

    async def _route(self, server: str, params: TaskStatusPush) -> None:
        state = self._servers.get(server)
        raw = params.model_dump(by_alias=True)
        task_id = raw.get("taskId")
        refs = (
            state.routes.get(task_id)
            if state is not None and isinstance(task_id, str) and task_id_problem(task_id) is None
            else None
        )
        if not refs:
            self.stats.ignored += 1
            log.debug("ignored a task push from %s naming no subscribed task", server)
            return
        reply, problem = parse_pushed_task(raw)
        for ref in refs:
            if reply is None:
                handled = await self._scheduler.reject_pushed(ref, problem or "malformed")
                self.stats.rejected += handled
            else:
                handled = await self._scheduler.observe_pushed(ref, reply)
                self.stats.applied += handled
            self.stats.ignored += not handled

    # -- one server --------------------------------------------------------------------------
    async def _keep_in_step(self, state: _ServerPush) -> None:
        while True:
            await state.changed.wait()
            await anyio.sleep(self.config.settle_ms / 1000)
            state.changed = anyio.Event()
            wanted = self._wanted(state)
            state.routes = wanted
            # A stream naming no watched handle any more is closed: nothing it could still
            # deliver is wanted.
            for stream in [s for s in state.streams if not s.ids & wanted.keys()]:
                self._close(state, stream)
            asked = frozenset().union(*(s.ids for s in state.streams))
            missing = frozenset(wanted) - asked
            if not missing:
                self._sync_coverage(state)
                continue
            # At the limit, the half of the streams naming the fewest watched handles are
            # folded into the new one: the fewer handles they carry, the fewer polled again.
            fold: list[_Stream] = []
            if len(state.streams) >= self.config.max_streams:
                by_size = sorted(state.streams, key=lambda s: len(s.ids & wanted.keys()))
                fold = by_size[: max(1, len(by_size) // 2)]
                missing = missing.union(*(s.ids & wanted.keys() for s in fold))
            try:
                await self._open(state, missing, fold=fold)
                state.failures = 0
            except Exception as exc:  # whatever failed, polling goes on; listen again later
                self.stats.lost += 1
                log.debug("listen on %s failed: %s", state.name, _describe(exc))
                self._retry_later(state)

    def _wanted(self, state: _ServerPush) -> dict[str, list[str]]:
        views: list[TaskView] = self._scheduler.watched_on(state.endpoint)
        routes: dict[str, list[str]] = {}
        for view in views:
            if len(routes) >= self.config.max_task_ids and view.task_id not in routes:
                continue
            routes.setdefault(view.task_id, []).append(view.ref)
        return routes

    async def _open(self, state: _ServerPush, ids: frozenset[str], *, fold: list[_Stream]) -> None:
        connection = self._pool.connection(state.name)
        try:
            session = await connection.session()
        except Exception as exc:
            raise _ListenFailed(type(exc).__name__) from None
        if not advertises_task_push(connection.info) or state.refused_by == id(session):
            self.stats.unsupported.add(state.name)
            self._close_all(state)
            return
        stream = _Stream(ids)
        # Polls of these handles that come due before the acknowledgement wait for it: the
        # first poll after it has to be sent anyway, and sees every change made before.
        refs = [ref for task_id in ids for ref in state.routes.get(task_id, ())]
        self._scheduler.listen_pending(refs)
        try:
            await self._listen(state, stream, connection, id(session), fold=fold)
        finally:
            self._scheduler.listen_settled(refs)

    async def _listen(
        self,
        state: _ServerPush,
        stream: _Stream,
        connection: ServerConnection,
        session_id: int,
        *,
        fold: list[_Stream],
    ) -> None:
        """Open ``stream`` on the session ``session_id`` names, wait for its acknowledgement,
        and put it in service."""
        state.pending = stream
        self._tg.start_soon(self._drive, state, stream, connection)
        with anyio.move_on_after(self.config.ack_timeout_s):
            await stream.acked.wait()
        state.pending = None
        if stream.ended or stream.honored is None:
            stream.close()
            raise _ListenFailed("no acknowledgement")
        if not stream.honored:
            # The server listens but pushes no task states: poll only, on this connection.
            state.refused_by = session_id
            self.stats.unsupported.add(state.name)
            stream.close()
            self._close_all(state)
            return
        self.stats.listens += 1
        if not fold:
            state.streams.append(stream)
            self._sync_coverage(state)
            return
        # Merged: the folded streams are closed, and a push already on its way over one of them
        # is lost with it; each handle they carried is polled once more (after this
        # acknowledgement, so that poll sees any change the lost push carried).
        self.stats.merges += 1
        carried = state.honoured_refs(fold)
        for old in fold:
            self._close(state, old)
        state.streams.append(stream)
        self._sync_coverage(state, verify=carried)

    def _sync_coverage(self, state: _ServerPush, *, verify: frozenset[str] = frozenset()) -> None:
        """Tell the scheduler which handles an open stream honours (polled at the backstop)
        and which no longer are (polled at the server's interval again)."""
        covered = state.honoured_refs()
        self._scheduler.push_ended((state.covered - covered) | (verify & covered))
        self._scheduler.push_acknowledged(covered)
        state.covered = covered

    def _close(self, state: _ServerPush, stream: _Stream) -> None:
        stream.close()
        state.streams.remove(stream)

    def _close_all(self, state: _ServerPush) -> None:
        for stream in state.streams:
            stream.close()
        state.streams = []
        self._sync_coverage(state)

    async def _drive(
        self, state: _ServerPush, stream: _Stream, connection: ServerConnection
    ) -> None:
        request = mcp_types.SubscriptionsListenRequest(
            params=mcp_types.SubscriptionsListenRequestParams(
                notifications=mcp_types.SubscriptionFilter(taskIds=sorted(stream.ids))
            )
        )
        graceful = False
        with stream.scope:
            try:
                session = await connection.session()
                await session.send_request(
                    request,
                    mcp_types.SubscriptionsListenResult,
                    request_read_timeout_seconds=self.config.stream_timeout_s,
                )
                graceful = True
            except Exception as exc:  # the stream is gone, whatever broke it
                log.debug("listen stream on %s ended: %s", state.name, type(exc).__name__)
        stream.ended = True
        stream.acked.set()  # wake an opener still waiting for the acknowledgement
        if stream.closing or stream not in state.streams:
            return
        state.streams.remove(stream)
        self._sync_coverage(state)
        if not graceful:
            self.stats.lost += 1
        self._retry_later(state)

    def _retry_later(self, state: _ServerPush) -> None:
        state.failures += 1
        delay = min(
            self.config.backoff_base_ms * 2 ** min(state.failures - 1, 16),
            self.config.backoff_max_ms,
        )
        self._tg.start_soon(self._poke_after, state, delay)

    async def _poke_after(self, state: _ServerPush, delay_ms: int) -> None:
        await anyio.sleep(delay_ms / 1000)
        state.changed.set()


def _describe(exc: Exception) -> str:
    # Only our own failure texts are quoted; anything else by type (its text may carry ids).
    return str(exc) if isinstance(exc, _ListenFailed) else type(exc).__name__


def advertises_task_push(info: ServerInfo) -> bool:
    """Whether discovery says the server has the Tasks extension and serves
    ``subscriptions/listen`` (at 2026-07-28 its change-notification flags derive from that)."""
    caps = info.capabilities
    if caps is None or info.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    if TASKS_EXTENSION not in (caps.extensions or {}):
        return False
    tools, prompts, resources = caps.tools, caps.prompts, caps.resources
    return bool(
        (tools is not None and tools.list_changed)
        or (prompts is not None and prompts.list_changed)
        or (resources is not None and (resources.subscribe or resources.list_changed))
    )


def parse_pushed_task(raw: dict[str, Any]) -> tuple[DetailedTask | None, str | None]:
    """The pushed task as a ``tasks/get`` reply, or why it is malformed (never quoting values:
    they may carry the raw task id)."""
    try:
        reply = DetailedTask.model_validate(raw)
    except ValidationError as exc:
        fields = sorted({str(error["loc"][0]) for error in exc.errors() if error["loc"]})
        return None, f"not a task ({', '.join(fields) or 'shape'} invalid)"
    try:
        status = TaskStatus(reply.status)
    except ValueError:
        return None, "unknown status"
    needed = _REQUIRED_FOR.get(status)
    if needed is not None and not isinstance(getattr(reply, needed), dict):
        return None, f"{status.value} without {needed}"
    return reply, None
