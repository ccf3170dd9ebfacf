"""What the gateway does for each MCP request, on one :class:`~bridge.Bridge`.

- A client that declares the Tasks extension gets, for a call that became an upstream task, a
  *bridge-issued* handle: high entropy, bound to the caller's principal, committed to the
  ledger before it is returned; ``tasks/get`` / ``tasks/update`` / ``tasks/cancel`` are served
  from the ledger, which the bridge's scheduler keeps current whether or not the client is
  connected.
- A client that does not gets an ordinary ``tools/call`` that waits for the task up to the
  tool's deadline. Calling again with the same ``_meta`` operation id
  (:data:`OPERATION_ID_META_KEY`) or ``Idempotency-Key`` replays the recorded call: nothing
  is sent upstream twice.

Which outer run a call joins: :mod:`bridge.gateway._runs`; when that run ends:
:mod:`bridge.gateway._run_ends`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio
import mcp_types

from bridge._errors import (
    InputAlreadyAnswered,
    NotFound,
    OperationReused,
    ServerConnectFailed,
    TaskWasLost,
    UnknownInputKey,
    UnknownServer,
)
from bridge._facade import Bridge
from bridge._mcp.calls.call_progress import relaying_progress
from bridge._mcp.wire.call_listener import listening
from bridge._mcp.wire.tool_result import error_result
from bridge._outcomes import CallOutcome
from bridge._policies import WaitMode
from bridge._runtime.step_results import RecoverableFailure, TaskPending, TaskSettled
from bridge.gateway._config import GatewayConfig
from bridge.gateway._forwarding import ClientChannel, TaskCompanion, deliver_responses
from bridge.gateway._identity import OPERATION_ID_META_KEY, OuterIdentity, invalid_params
from bridge.gateway._naming import exposed_name, split_exposed
from bridge.gateway._runs import GATEWAY_HARNESS, GatewayRuns
from bridge.gateway._task_wire import task_body

__all__ = ["OPERATION_ID_META_KEY", "GatewayCall", "GatewayCalls", "invalid_params"]

HANDLE_BYTES = 24  # secrets.token_urlsafe: 192 bits

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GatewayCall:
    """One client ``tools/call`` as the gateway received it."""

    principal: str
    session: str  # the client's MCP session (``default`` when it has none)
    name: str  # ``<server>__<tool>``
    arguments: dict[str, Any]
    op_id: str | None  # the client's operation id / idempotency key, if it sent one
    outer: OuterIdentity | None = None  # the UHP response/session it named, if any

    @property
    def operation_id(self) -> str | None:
        """The bridge's operation id: namespaced, so a client's ids never meet the host's."""
        return f"{GATEWAY_HARNESS}:{self.op_id}" if self.op_id else None


class GatewayCalls:
    def __init__(self, bridge: Bridge, config: GatewayConfig) -> None:
        self.bridge = bridge
        self.config = config
        self._runs = GatewayRuns(bridge)
        self._servers = {server.name for server in config.servers if server.enabled}

    # -- tools/list ------------------------------------------------------------------------
    async def list_tools(self, principal: str) -> list[mcp_types.Tool]:
        """Every enabled upstream's tools under ``<server>__<tool>``; an upstream that cannot
        be reached right now is left out (and logged), the others are still listed."""
        tools: list[mcp_types.Tool] = []
        for server in self.config.servers:
            if not server.enabled:
                continue
            try:
                listed = await self.bridge.list_tools(principal, server.name)
            except ServerConnectFailed as exc:
                logger.warning("gateway: upstream %s not listed: %s", server.name, exc)
                continue
            tools.extend(
                t.model_copy(update={"name": exposed_name(server.name, t.name)}) for t in listed
            )
        return tools

    # -- tools/call ------------------------------------------------------------------------
    async def call_with_task(self, call: GatewayCall) -> dict[str, Any] | mcp_types.CallToolResult:
        """Tasks-extension client: a task becomes a bridge-issued handle (durable first)."""
        async with self._joined(call) as run_ref:
            outcome = await self._call(call, run_ref, WaitMode.DETACH, None)
        if not isinstance(outcome, TaskPending | TaskSettled):
            return self._plain_result(outcome, call.op_id)
        handle = secrets.token_urlsafe(HANDLE_BYTES)
        await self._runs.records.record_handle(
            call.principal, handle, outcome.task.ref, outcome.op_ref
        )
        inputs = await self._inputs(call.principal, outcome.task.ref)
        return {"resultType": "task", **task_body(handle, outcome.task, inputs)}

    async def call_and_wait(
        self, call: GatewayCall, channel: ClientChannel | None = None
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        """Client without the Tasks extension: wait for the task up to the tool's deadline,
        telling the client about it meanwhile (:mod:`bridge.gateway._forwarding`)."""
        channel = channel or ClientChannel()
        # An MRTR round echoes our requestState: the operation id of the call it continues.
        call = replace(call, op_id=call.op_id or channel.request_state or secrets.token_urlsafe(16))
        assert call.op_id is not None
        async with self._joined(call) as run_ref:
            return await self._wait(call, run_ref, channel)

    async def _wait(
        self, call: GatewayCall, run_ref: str, channel: ClientChannel
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        assert call.op_id is not None
        after_seq = (await self.bridge.read(call.principal, lambda r: r.run(run_ref))).event_count
        # An upstream answering directly may report progress, log and elicit on the way.
        with relaying_progress(channel.relay), listening(channel.listener):
            outcome = await self._call(call, run_ref, WaitMode.DETACH, None)
        if isinstance(outcome, TaskPending):
            task_ref = outcome.task.ref
            pending = await self._inputs(call.principal, task_ref)
            await deliver_responses(pending, channel.input_responses)
            companion = TaskCompanion(self.bridge, call.principal, task_ref, channel, call.op_id)
            deadline = self.config.deadline_for(call.name, hears_progress=channel.hears_progress)
            waited = await companion.beside(
                run_ref, after_seq, partial(self._call, call, run_ref, WaitMode.WAIT, deadline)
            )
            if isinstance(waited, mcp_types.InputRequiredResult):
                return waited
            outcome = waited
        return self._plain_result(outcome, call.op_id)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[GatewayCalls]:
        """Serving: the gateway's runs watched until they end (:mod:`bridge.gateway._run_ends`),
        those a previous gateway left open too."""
        async with anyio.create_task_group() as group:
            await self._runs.ends.start(group)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()

    def _joined(self, call: GatewayCall) -> AbstractAsyncContextManager[str]:
        """The outer run the call is recorded under (resolved once per request), held open
        while the request is in it. A tool name no upstream can have opens no run."""
        target = split_exposed(call.name)
        if target is None or target[0] not in self._servers:
            raise invalid_params(f"unknown tool {call.name!r} (gateway tools are <server>__<tool>)")
        return self._runs.joined(call.principal, call.session, call.outer, call.operation_id)

    async def _call(
        self, call: GatewayCall, run_ref: str, wait: WaitMode, deadline_s: float | None
    ) -> CallOutcome:
        target = split_exposed(call.name)
        assert target is not None  # checked before the run was joined
        try:
            return await self.bridge.run(call.principal, run_ref).call_tool(
                *target,
                call.arguments,
                operation_id=call.operation_id,
                wait=wait,
                wait_deadline_s=deadline_s,
            )
        except UnknownServer:
            raise invalid_params(f"unknown tool {call.name!r}") from None
        except OperationReused:
            raise invalid_params(
                "this operation id (or idempotency key) was already used for another tool,"
                " other arguments or another outer response"
            ) from None

    def _plain_result(self, outcome: CallOutcome, op_id: str | None) -> mcp_types.CallToolResult:
        meta = {OPERATION_ID_META_KEY: op_id} if op_id else None
        if isinstance(outcome, TaskPending | RecoverableFailure):
            reason = outcome.reason if isinstance(outcome, RecoverableFailure) else "detached"
            again = (
                f"; call again with _meta {OPERATION_ID_META_KEY!r} = {op_id!r} for its outcome"
                if op_id
                else ""
            )
            result = error_result(f"the task is still running ({reason}){again}")
        else:
            try:
                result = outcome.to_call_tool_result()
            except Exception as exc:  # NoToolResult: unknown outcome, refused call, truncated
                result = error_result(str(exc))
        return result.model_copy(update={"meta": meta}) if meta else result

    # -- tasks/get, tasks/update, tasks/cancel ---------------------------------------------
    async def get_task(self, principal: str, handle: str) -> dict[str, Any]:
        task_ref = await self._task_ref(principal, handle)
        task = await (await self.bridge.run_of(principal, task_ref)).task(task_ref)
        return task_body(handle, task, await self._inputs(principal, task_ref))

    async def update_task(self, principal: str, handle: str, responses: dict[str, Any]) -> None:
        """A client's answers, passed on as they came (the upstream server checks them):
        recorded, then sent upstream (by the bridge, which redelivers after a restart). A key
        that is not a pending input of this task, or one already answered, is ignored (the
        Tasks extension's ``tasks/update`` is an eventually consistent ack); a lost task is
        ``-32602``."""
        task_ref = await self._task_ref(principal, handle)
        for input_ref, response in responses.items():
            try:
                await self.bridge.answer_unchecked(principal, task_ref, input_ref, response)
            except (UnknownInputKey, InputAlreadyAnswered):
                continue
            except (TaskWasLost, NotFound) as exc:
                raise invalid_params(f"input {input_ref!r}: {exc}") from None

    async def cancel_task(self, principal: str, handle: str) -> None:
        task_ref = await self._task_ref(principal, handle)
        await (await self.bridge.run_of(principal, task_ref)).cancel_task(task_ref)

    async def _task_ref(self, principal: str, handle: str) -> str:
        task_ref = await self._runs.records.task_of(principal, handle)
        if task_ref is None:  # unknown, or another principal's: indistinguishable
            raise invalid_params("Task not found")
        return task_ref

    async def _inputs(self, principal: str, task_ref: str) -> list[Any]:
        return [i for i in await self.bridge.pending_inputs(principal) if i.task_ref == task_ref]
