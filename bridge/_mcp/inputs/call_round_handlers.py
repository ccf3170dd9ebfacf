"""A call's MRTR inputs meet the host's handlers, like a task's (:mod:`.task_input_handlers`).

:meth:`CallInputs.recorded` is the hook :class:`~bridge._mcp.inputs.call_rounds.CallRounds` calls
right after a round's inputs are on record: each request goes to
:meth:`bridge._mcp.inputs.handlers.InputHandlers.handle` in a task of its own, and ``call_tool``
returns :class:`~bridge.InputPending` at once — a handler (a person, a model) never
holds up the call's reply. A handler's answer goes through the request like the host's; the
answer completing the leg sends the call again, so an ``ask`` step simply continues.

The bridge's own decisions are recorded on the call (:class:`CallInputDecisions`):

* an elicitation declined by policy gets ``{"action": "decline"}`` recorded as its answer, so
  the leg completes and the call goes out again (the server decides what a decline means);
* sampling has no wire decline: ``call.input_declined`` (``answered=false``) is recorded and
  the request stays pending for the host. That is the conservative choice: an MRTR call holds
  nothing on the server between legs (its state travels with the client), so waiting costs
  nothing, while giving the call up would discard work the host may still want to answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyio.abc import TaskGroup

from bridge import events as ev
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger
from bridge._mcp.inputs.call_rounds import CallRounds
from bridge._mcp.inputs.handlers import (
    InputDecisions,
    InputHandlers,
    handle_in_background,
)
from bridge._outcomes import InputRequest
from bridge._policies import InputPolicy


class CallInputDecisions(InputDecisions):
    """Records the bridge's decisions about one principal's MRTR inputs."""

    def __init__(self, ledger: Ledger, db: LedgerRunner, rounds: CallRounds, principal: str):
        self._principal = principal
        self._calls = ledger.for_principal(principal).rounds
        super().__init__(db, self._calls.record_call_input_handler_failed)
        self._rounds = rounds

    def owner_of(self, request: InputRequest) -> str:
        if request.op_ref is None or request.task_ref is not None:
            raise ValueError(f"{request.input_ref} is not a call's input request")
        return request.op_ref

    async def decline(
        self,
        request: InputRequest,
        reason: ev.DeclineReason,
        answer: dict[str, Any] | None,
    ) -> None:
        op_ref = self.owner_of(request)
        declined = self._calls.record_call_input_declined
        _, ready = await self._db(declined, op_ref, request.input_ref, reason, answer)
        if ready:  # the decline completed the leg: the call goes out again with it
            await self._rounds.send_pending(self._principal, op_ref)


class CallInputs:
    """The MRTR rounds' input hook: every new input of a call goes to its handler."""

    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        rounds: CallRounds,
        task_group: TaskGroup,
        handlers: InputHandlers,
        policy: InputPolicy,
    ) -> None:
        self._ledger = ledger
        self._db = db
        self._rounds = rounds
        self._tg = task_group
        self._handlers = handlers
        self._policy = policy

    def recorded(self, principal: str, server: str, requests: Sequence[InputRequest]) -> None:
        """New inputs of a call on ``server`` (its configured name) are on record."""
        for request in requests:
            self._tg.start_soon(self._handle, principal, server, request)

    async def _handle(self, principal: str, server: str, request: InputRequest) -> None:
        decisions = CallInputDecisions(self._ledger, self._db, self._rounds, principal)
        await handle_in_background(
            self._handlers, request, server=server, policy=self._policy, decisions=decisions
        )
