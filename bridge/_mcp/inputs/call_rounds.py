"""Multi-round-trip requests (MRTR): a ``tools/call`` the server answers with an
``InputRequiredResult`` before it creates any task.

The reply is one *round* of the call (:mod:`bridge._ledger.rounds`), never an unknown outcome:
its input requests are surfaced once each (``call.input_required``) as the same typed
:class:`~bridge.InputRequest` a task's inputs are, and go to the host's input handlers
(:mod:`bridge._mcp.inputs.call_round_handlers`). Once every input of the round is answered, the
next leg is committed as ``sent`` and the call goes out again with ``inputResponses`` and the
state echoed verbatim; it returns what any call returns. A round answered completely whose next
leg was never committed is sent on start; the same operation id never sends twice. The steps
and crash windows are in docs/mcp-side.md, "Input before any task (MRTR)".
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types
import pydantic
from anyio.abc import TaskGroup

from bridge._errors import (
    InvalidAnswer,
    InvalidTaskResponse,
    ServerConnectFailed,
)
from bridge._ledger.reads.views import CallInputView, CallView
from bridge._ledger.rounds import RetryLeg
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, TenantLedger
from bridge._mcp.servers import ServerConnection, ServerPool
from bridge._outcomes import (
    ELICITATION,
    SAMPLING,
    AnswerDelivery,
    AnswerReceipt,
    CallOutcome,
    InputPending,
    InputRequest,
)

logger = logging.getLogger(__name__)

# requestState is opaque server data the bridge stores and echoes: bounded, so a server cannot
# make every round a large write (the SDK's own sealed states are well under 4 KiB).
MAX_REQUEST_STATE_BYTES = 64 * 1024
# Legs one call may take. A round with no input requests (only a state) is sent again at once;
# this stops a server that never finishes from looping forever.
MAX_LEGS = 32

# What an answer must look like, per method, before it is recorded (the wire's result types).
_ANSWER_TYPES: dict[str, pydantic.TypeAdapter[Any]] = {
    ELICITATION: pydantic.TypeAdapter(mcp_types.ElicitResult),
    SAMPLING: pydantic.TypeAdapter(
        mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools
    ),
    "roots/list": pydantic.TypeAdapter(mcp_types.ListRootsResult),
}
_RESPONSES: pydantic.TypeAdapter[mcp_types.InputResponses] = pydantic.TypeAdapter(
    mcp_types.InputResponses
)

# Told about the new inputs of a round (principal, configured server name, requests), right
# after they are recorded: the input handlers' hook (bridge._mcp.inputs.call_round_handlers). Must
# not block.
InputsRecorded = Callable[[str, str, Sequence[InputRequest]], None]

# Sends one leg of a call (the requester's write-ahead send path) and returns its outcome.
LegSender = Callable[
    [TenantLedger, ServerConnection, CallView, str, dict[str, Any], RetryLeg | None],
    Awaitable[CallOutcome],
]


def wire_responses(leg: RetryLeg) -> mcp_types.InputResponses:
    """The recorded answers as the SDK sends them (``inputResponses``)."""
    return _RESPONSES.validate_python(leg.responses)


class CallRounds:
    """The MRTR side of the requester: record rounds, take answers, send the next leg."""

    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        pool: Callable[[], ServerPool],
        send_leg: LegSender,
    ) -> None:
        self._ledger = ledger
        self._db = db
        self._pool = pool
        self._send_leg = send_leg
        self.on_inputs: InputsRecorded | None = None  # set by the requester (input handlers)

    async def received(
        self,
        tenant: TenantLedger,
        connection: ServerConnection,
        intent: CallView,
        reply: mcp_types.InputRequiredResult,
        arguments: dict[str, Any],
    ) -> CallOutcome:
        """Leg ``n`` of ``intent`` got an ``InputRequiredResult``: record it and surface its
        inputs; a round without inputs goes out again at once."""
        state = reply.request_state
        if state is not None and len(state.encode("utf-8")) > MAX_REQUEST_STATE_BYTES:
            await self._refuse(tenant, intent, "oversized_request_state", "requestState too large")
        requests = {
            key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, request in (reply.input_requests or {}).items()
        }
        inputs = await self._db(
            tenant.rounds.record_input_round,
            intent.ref,
            requests,
            request_state=state,
            arguments=arguments,
        )
        leg = await self._db(tenant.rounds.current_leg, intent.ref)
        if inputs:
            typed = self._typed(tenant.principal, inputs)
            if self.on_inputs is not None:  # handlers answer concurrently: never awaited here
                self.on_inputs(tenant.principal, connection.config.name, typed)
            return InputPending(intent.ref, leg, typed)
        if leg >= MAX_LEGS:
            await self._refuse(tenant, intent, "too_many_input_rounds", f"{leg} legs")
        outcome = await self._next_leg(tenant, connection, intent.ref)
        assert outcome is not None  # nothing to answer: the leg was ours to send
        return outcome

    async def _refuse(self, tenant: TenantLedger, intent: CallView, kind: str, detail: str) -> None:
        """A reply the bridge cannot carry on from: the call is unknown (as any malformed
        reply), with an anomaly naming why."""
        detail = f"tools/call: InputRequiredResult refused ({detail})"
        await self._db(tenant.calls.mark_dispatch_unknown, intent.ref, detail)
        await self._db(tenant.runs.record_anomaly, intent.run_ref, kind, detail, op_ref=intent.ref)
        raise InvalidTaskResponse(intent.ref, detail)

    async def answer(
        self, principal: str, op_ref: str, input_ref: str, response: Any
    ) -> AnswerReceipt:
        """Record one answer (checked against the method's result shape first, exactly once),
        then, if it was the round's last, send the call's next leg."""
        tenant = self._ledger.for_principal(principal)
        pending = await self._db(tenant.rounds.call_inputs, op_ref, pending_only=True)
        asked = next((i for i in pending if input_ref in (i.ref, i.key)), None)
        if asked is not None and asked.method in _ANSWER_TYPES:
            try:
                _ANSWER_TYPES[asked.method].validate_python(response)
            except pydantic.ValidationError as exc:
                detail = f"not a {asked.method} result: {exc.errors()[0]['msg']}"
                raise InvalidAnswer(asked.ref, detail) from None
        answer = tenant.rounds.record_call_input_answer
        view, ready = await self._db(answer, op_ref, input_ref, response)
        if not ready:
            return AnswerReceipt(None, view.ref, AnswerDelivery.AWAITING_INPUTS, op_ref=op_ref)
        outcome = await self._retry_if_reachable(tenant, op_ref)
        if outcome is None:
            return AnswerReceipt(None, view.ref, AnswerDelivery.QUEUED, op_ref=op_ref)
        return AnswerReceipt(None, view.ref, AnswerDelivery.RETRIED, op_ref=op_ref, outcome=outcome)

    async def _retry_if_reachable(self, tenant: TenantLedger, op_ref: str) -> CallOutcome | None:
        """Send the next leg, or None when the server cannot be reached (nothing was sent:
        the answered round stays, and is sent on the next start) or another process did."""
        try:
            return await self._next_leg(tenant, None, op_ref)
        except ServerConnectFailed as exc:
            logger.warning("call %s: server unreachable, its next leg waits: %s", op_ref, exc)
            return None

    async def _next_leg(
        self, tenant: TenantLedger, connection: ServerConnection | None, op_ref: str
    ) -> CallOutcome | None:
        if connection is None:
            dispatch = await self._db(tenant.reads.get_dispatch, op_ref)
            connection = self._pool().connection(dispatch.server_name or dispatch.server_endpoint)
        await connection.session()  # unreachable -> raises here, before the leg is committed
        leg = await self._db(tenant.rounds.begin_retry_leg, op_ref)
        if leg is None:
            return None  # not (or no longer) ours to send
        dispatch = leg.dispatch
        return await self._send_leg(
            tenant, connection, dispatch, dispatch.tool_name, leg.arguments, leg
        )

    async def resume(self, principals: Sequence[str], tg: TaskGroup) -> int:
        """Send, in the background (a slow server must not hold up the start), every round
        answered in full whose next leg never went out (the process stopped in between)."""
        due = 0
        for principal in principals:
            tenant = self._ledger.for_principal(principal)
            for op_ref in await self._db(tenant.rounds.calls_ready_to_retry):
                tg.start_soon(self.send_pending, principal, op_ref)
                due += 1
        return due

    async def send_pending(self, principal: str, op_ref: str) -> None:
        """Send one answered round's next leg (after a restart, or answered by the bridge's
        own decision); its outcome is in the ledger and the run's events."""
        tenant = self._ledger.for_principal(principal)
        try:
            await self._retry_if_reachable(tenant, op_ref)
        except Exception as exc:  # recorded (unknown, anomaly) by the send path; a background
            # task must not take the requester down with it
            logger.warning("call %s: next leg failed: %s", op_ref, type(exc).__name__)

    async def pending(self, principal: str, run_ref: str | None = None) -> list[InputRequest]:
        """Unanswered inputs of calls waiting for input (of one run), oldest first."""
        tenant = self._ledger.for_principal(principal)
        pending = await self._db(tenant.rounds.pending_call_inputs, run_ref)
        return list(self._typed(principal, pending))

    async def pending_of(self, principal: str, op_ref: str) -> InputPending:
        """A call recorded ``input_required`` as the outcome it returned (a replayed call)."""
        tenant = self._ledger.for_principal(principal)
        leg = await self._db(tenant.rounds.current_leg, op_ref)
        inputs = await self._db(tenant.rounds.call_inputs, op_ref, leg=leg, pending_only=True)
        return InputPending(op_ref, leg, self._typed(principal, inputs), replayed=True)

    def input_request(
        self, principal: str, op_ref: str, input_ref: str, method: str, params: Any
    ) -> InputRequest:
        """The typed request for one MRTR input; answering it goes through :meth:`answer`."""
        send = functools.partial(self.answer, principal, op_ref, input_ref)
        fields = params if isinstance(params, dict) else {}
        return InputRequest(principal, None, input_ref, method, fields, send, op_ref=op_ref)

    def _typed(self, principal: str, views: Sequence[CallInputView]) -> tuple[InputRequest, ...]:
        return tuple(
            self.input_request(principal, v.op_ref, v.ref, v.method, v.params) for v in views
        )
