"""What a plain ``tools/call`` (a client without the Tasks extension) hears while the gateway
waits on its upstream task: progress, and the task's input requests forwarded as elicitation.

- **Progress.** With a ``progressToken`` the client gets ``notifications/progress`` (progress =
  seconds waited, message = the task's status and status message) when the wait starts, on
  every upstream status change, and at least every :data:`PROGRESS_INTERVAL_S`.
- **Elicitation.** A client that declared ``elicitation`` is asked each pending
  ``elicitation/create`` of the task, keyed by the bridge's input reference (``in_…``). On a
  connection that can carry server→client requests (a handshake-era session) it is asked
  inline; on the 2026-07-28 stateless core, where it cannot, the call answers with the
  spec's ``InputRequiredResult`` (MRTR) and the client calls again with ``inputResponses``.
  Either way the answer goes upstream through :class:`~bridge.InputRequest`
  (schema-checked, recorded once): a key already answered is never asked again, and a repeat
  answer for it is ignored. A client without ``elicitation`` is not asked (the operator
  answers with ``bridge answer``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import mcp_types
from mcp.shared.exceptions import MCPError

from bridge import events as ev
from bridge._errors import InputAlreadyAnswered, InvalidAnswer, UnknownInputKey
from bridge._facade import Bridge
from bridge._mcp.calls.call_progress import ProgressRelay
from bridge._mcp.wire.call_listener import CallListener
from bridge._outcomes import ELICITATION, CallOutcome, InputRequest, elicit
from bridge._run import Run

PROGRESS_INTERVAL_S = 1.0

logger = logging.getLogger(__name__)

# (progress, message) -> a notifications/progress for this request (a no-op without a token)
ProgressSender = Callable[[float, str | None], Awaitable[None]]
# elicitation/create params -> the client's ElicitResult (inline, on this request's stream)
InlineElicitor = Callable[[mcp_types.ElicitRequestFormParams], Awaitable[mcp_types.ElicitResult]]


async def _no_progress(progress: float, message: str | None) -> None:
    return None


@dataclass(frozen=True, slots=True)
class ClientChannel:
    """What the gateway may do towards the client of one plain ``tools/call``."""

    progress: ProgressSender = _no_progress
    hears_progress: bool = False  # the call carried a progressToken: progress reaches it
    elicits: bool = False  # the client declared the elicitation capability
    inline: InlineElicitor | None = None  # set when the connection carries server requests
    input_responses: dict[str, Any] = field(default_factory=dict)  # an MRTR round's answers
    request_state: str | None = None  # echoed from our InputRequiredResult: the operation id
    relay: ProgressRelay | None = None  # an upstream's progress on a direct answer, passed on
    listener: CallListener | None = None  # an upstream's logs and elicitations on one


def forwardable(request: InputRequest) -> mcp_types.ElicitRequestFormParams | None:
    """The form elicitation to put to the client, or None (other methods, URL mode, a form
    the spec's shape does not admit): those stay for the operator."""
    if request.method != ELICITATION or request.params.get("mode", "form") != "form":
        return None
    try:
        return mcp_types.ElicitRequestFormParams(
            message=request.message or "",
            requested_schema=request.requested_schema or {},
        )
    except ValueError as exc:
        logger.info("gateway: input %s not forwarded: %s", request.input_ref, exc)
        return None


async def deliver(request: InputRequest, answer: mcp_types.ElicitResult) -> None:
    """The client's answer, schema-checked, recorded once and sent upstream."""
    try:
        await elicit(request, answer.action, content=answer.content)
    except InvalidAnswer as exc:
        raise MCPError(code=mcp_types.INVALID_PARAMS, message=str(exc)) from None
    except (InputAlreadyAnswered, UnknownInputKey):
        pass  # answered already (an earlier round, the operator): recorded once, not again


async def deliver_responses(requests: list[InputRequest], responses: dict[str, Any]) -> None:
    """An MRTR round's ``inputResponses``; keys that are no longer pending were answered."""
    pending = {r.input_ref: r for r in requests}
    for key, raw in responses.items():
        request = pending.get(key)
        if request is None:
            continue
        try:
            answer = mcp_types.ElicitResult.model_validate(raw)
        except ValueError:
            raise MCPError(
                code=mcp_types.INVALID_PARAMS, message=f"input {key!r}: not an ElicitResult"
            ) from None
        await deliver(request, answer)


class TaskCompanion:
    """Progress and input forwarding for one waiting call, run :meth:`beside` it."""

    def __init__(
        self,
        bridge: Bridge,
        principal: str,
        task_ref: str,
        channel: ClientChannel,
        op_id: str,
    ) -> None:
        self.bridge = bridge
        self.principal = principal
        self.task_ref = task_ref
        self.channel = channel
        self.op_id = op_id
        self._started = anyio.current_time()
        self._last_progress = -1.0
        self._asked: set[str] = set()

    async def beside(
        self, run_ref: str, after_seq: int, waiting: Callable[[], Awaitable[CallOutcome]]
    ) -> CallOutcome | mcp_types.InputRequiredResult:
        """Run beside ``waiting()`` (the call waiting for the task): its outcome, or the
        client's next round of questions (the wait is then cut off; the task stays recorded
        and watched)."""
        outcome: CallOutcome | mcp_types.InputRequiredResult | None = None
        try:
            async with anyio.create_task_group() as group:

                async def wait() -> None:
                    nonlocal outcome
                    outcome = await waiting()
                    group.cancel_scope.cancel()

                group.start_soon(wait)
                asks = await self._run(self.bridge.run(self.principal, run_ref), after_seq)
                if asks is not None and outcome is None:  # a closed task's outcome wins
                    outcome = asks
                    group.cancel_scope.cancel()
        except ExceptionGroup as failed:  # one failure: raise it as raised (an MCPError)
            if len(failed.exceptions) == 1:
                raise failed.exceptions[0] from None
            raise
        assert outcome is not None  # set by whichever of the two ended the group
        return outcome

    async def _run(self, run: Run, after_seq: int) -> mcp_types.InputRequiredResult | None:
        async with anyio.create_task_group() as group:
            group.start_soon(self._tick, run)
            asks = await self._follow(run, after_seq)
            group.cancel_scope.cancel()
        return asks

    async def _follow(self, run: Run, after_seq: int) -> mcp_types.InputRequiredResult | None:
        asks = await self._ask_pending()
        if asks is not None:
            return asks
        # Run.subscribe is an async generator: closed here, not left to the collector.
        events = cast(
            AsyncGenerator[ev.BridgeEvent, None],
            run.subscribe(after_seq=after_seq),
        )
        async with aclosing(events) as stream:
            async for event in stream:
                if getattr(event, "task_ref", None) != self.task_ref:
                    continue
                if event.is_final:
                    return None
                if isinstance(event, ev.TaskStatusChanged):
                    await self._progress(event.status.value, event.status_message)
                elif isinstance(event, ev.TaskInputRequired):
                    asks = await self._ask_pending()
                    if asks is not None:
                        return asks
        return None

    async def _tick(self, run: Run) -> None:
        while True:
            task = await run.task(self.task_ref)
            await self._progress(task.status.value, task.status_message)
            await anyio.sleep(PROGRESS_INTERVAL_S)

    async def _progress(self, status: str, status_message: str | None) -> None:
        # Progress must increase with each notification: seconds waited, never repeated.
        waited = max(anyio.current_time() - self._started, self._last_progress + 0.001)
        self._last_progress = waited
        message = f"{status}: {status_message}" if status_message else status
        await self.channel.progress(round(waited, 3), message)

    async def _ask_pending(self) -> mcp_types.InputRequiredResult | None:
        """Put each pending, not yet asked elicitation to the client: inline (answered here)
        or, on the stateless core, as one ``InputRequiredResult`` for the client to answer."""
        if not self.channel.elicits:
            return None
        pending = await self.bridge.pending_inputs(self.principal)
        to_ask: dict[str, tuple[InputRequest, mcp_types.ElicitRequestFormParams]] = {}
        for request in pending:
            form = forwardable(request) if request.task_ref == self.task_ref else None
            if form is not None and request.input_ref not in self._asked:
                to_ask[request.input_ref] = (request, form)
        if not to_ask:
            return None
        if self.channel.inline is None:
            return mcp_types.InputRequiredResult(
                input_requests={
                    key: mcp_types.ElicitRequest(params=form) for key, (_, form) in to_ask.items()
                },
                request_state=self.op_id,
            )
        for key, (request, form) in to_ask.items():
            self._asked.add(key)
            await deliver(request, await self.channel.inline(form))
        return None
