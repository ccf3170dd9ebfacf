"""2025-11-25 tasks that need input: the server's questions, received on a held ``tasks/result``.

In that generation a task in ``input_required`` sends its elicitation / sampling requests as
server-to-client requests tagged with the related task, on the stream of a ``tasks/result`` the
client holds open. :class:`LegacyInputs`, wrapped around the scheduler's input hook, opens that
``tasks/result`` in the background (at most :data:`MAX_HELD_PER_SERVER` per server, never inside
a poll, again if it ended while the task still asks); records each question through the
scheduler's own observation path (``PollScheduler.observe_pushed``) under a key derived from the
request itself (:func:`legacy_input_key`, so a re-ask is the same request); answers it with the
recorded answer (kept until the task ends, so a re-ask after a dropped stream is answered from
it); and takes the held reply as the task's outcome. The rules are in docs/mcp-side.md,
"``input_required`` on 2025-11-25". Raw task ids never reach the logs.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import mcp_types
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.client.session import ClientRequestContext, ElicitationFnT, SamplingFnT
from pydantic import BaseModel, ValidationError

from bridge import events as ev
from bridge._errors import UnknownInputKey
from bridge._ledger.fencing import Membership
from bridge._ledger.reads.views import InputRequestView, TaskView
from bridge._ledger.runner import LedgerRunner
from bridge._ledger.store import Ledger, input_request_digest
from bridge._lifecycle import TaskStatus
from bridge._mcp import legacy_shapes as legacy_wire
from bridge._mcp.inputs.direct_elicitation import answer_direct_elicitation
from bridge._mcp.inputs.handlers import InputHandlers
from bridge._mcp.polling.scheduler import PollScheduler
from bridge._mcp.polling.watches import InputObserver
from bridge._mcp.servers import ServerPool
from bridge._mcp.wire.call_listener import listener_of
from bridge._mcp.wire.generations import TaskGeneration, generation_of
from bridge._mcp.wire.shapes import DetailedTask

log = logging.getLogger(__name__)
ResultT = TypeVar("ResultT", bound=BaseModel)

# Held tasks/result streams per server at once (each is one open HTTP request); a task over
# the bound is held on a later poll, when one has ended.
MAX_HELD_PER_SERVER = 8
# How long one held tasks/result may wait (the task's requested lifetime); then a later poll
# opens another.
HOLD_TIMEOUT_S = legacy_wire.REQUESTED_TTL_MS / 1000
_KEY_DIGEST_CHARS = 24
_ELICIT = "elicitation/create"
_SAMPLE = "sampling/createMessage"
# What the SDK answers when no callback is registered: requests not tied to a held task
# (an elicitation tied to no task at all goes to the registered handler instead).
_NOT_ASKED = {
    _ELICIT: "Elicitation not supported",
    _SAMPLE: "Sampling not supported",
}


def legacy_input_key(method: str, params: dict[str, Any]) -> str:
    """The recorded key of a 2025-11-25 input request: ``<method>#<first 24 hex digits of the
    ledger's payload digest>``, stable across re-asks of the same question."""
    return f"{method}#{input_request_digest(method, params)[:_KEY_DIGEST_CHARS]}"


@dataclass(eq=False, slots=True)
class _Asking:
    """One 2025-11-25 task whose questions are received here, while it is watched."""

    principal: str
    task: TaskView
    changed: anyio.Event = field(default_factory=anyio.Event)  # an answer, a poll, the end
    handed: set[str] = field(default_factory=set)  # input refs answered to the server
    held: anyio.CancelScope | None = None  # the held tasks/result, while open
    ended: bool = False  # no longer watched: waiting requests give up

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class LegacyInputs:
    """The input hook of 2025-11-25 handles, around the scheduler's own (``inner``)."""

    def __init__(
        self,
        ledger: Ledger,
        db: LedgerRunner,
        pool: ServerPool,
        scheduler: PollScheduler,
        task_group: TaskGroup,
        inner: InputObserver | None,
        handlers: InputHandlers | None = None,
    ) -> None:
        self._handlers = handlers or InputHandlers()
        self._ledger = ledger
        self._db = db
        self._pool = pool
        self._scheduler = scheduler
        self._tg = task_group
        self._inner = inner
        self._asking: dict[str, _Asking] = {}  # by task ref
        self._by_handle: dict[tuple[str, str], str] = {}  # (endpoint, raw task id) -> task ref

    # -- the scheduler's input hook (InputObserver) -----------------------------------------
    def recorded(
        self, principal: str, task: TaskView, requests: list[ev.TaskInputRequired]
    ) -> None:
        if self._inner is not None:
            self._inner.recorded(principal, task, requests)

    async def polled(self, principal: str, task: TaskView, lease: Membership | None) -> None:
        if self.carries(task) and task.is_open and task.status is TaskStatus.INPUT_REQUIRED:
            self._hold(principal, task)
        asking = self._asking.get(task.ref)
        if asking is not None:
            asking.wake()  # e.g. declined without an answer: the waiting request learns it
        if self._inner is not None:
            await self._inner.polled(principal, task, lease)

    def forget(self, task_ref: str) -> None:
        asking = self._asking.pop(task_ref, None)
        if asking is not None:
            self._by_handle.pop((asking.task.server_endpoint, asking.task.task_id), None)
            asking.ended = True
            if asking.held is not None:
                asking.held.cancel()
            asking.wake()
        if self._inner is not None:
            self._inner.forget(task_ref)

    # -- the scheduler's answer carrier (AnswerCarrier) -------------------------------------
    def carries(self, task: TaskView) -> bool:
        return generation_of(task) is TaskGeneration.EXPERIMENTAL_2025_11_25

    def answers_recorded(self, task_ref: str) -> None:
        asking = self._asking.get(task_ref)
        if asking is not None:
            asking.wake()

    # -- the connections' callbacks (ServerRequests) ------------------------------------------
    def callbacks(self, endpoint: str) -> tuple[ElicitationFnT, SamplingFnT]:
        async def elicit(
            context: ClientRequestContext, params: mcp_types.ElicitRequestParams
        ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
            listener = listener_of(params.meta)
            if listener is not None:  # asked during a call whose caller listens: the caller
                return await listener.elicit(params)
            config = self._pool.config_for_endpoint(endpoint)
            if legacy_wire.RELATED_TASK_META not in (context.meta or {}) and config is not None:
                # Tied to no task (asked during a directly answered call): its handler.
                return await answer_direct_elicitation(self._handlers, config.name, params)
            return await self._answer(endpoint, context, _ELICIT, params, mcp_types.ElicitResult)

        async def sample(
            context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
        ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
            result_type = mcp_types.CreateMessageResult
            return await self._answer(endpoint, context, _SAMPLE, params, result_type)

        return elicit, sample

    # -- holding tasks/result -------------------------------------------------------------------
    def _hold(self, principal: str, task: TaskView) -> None:
        asking = self._asking.get(task.ref)
        if asking is not None and asking.held is not None:
            return  # one held tasks/result per task
        config = self._pool.config_for_endpoint(task.server_endpoint)
        if config is None or self._held_on(task.server_endpoint) >= MAX_HELD_PER_SERVER:
            return  # the poll decides about a gone server; a full server: a later poll
        if asking is None:
            asking = _Asking(principal, task)
            self._asking[task.ref] = asking
            self._by_handle[(task.server_endpoint, task.task_id)] = task.ref
        asking.held = anyio.CancelScope()
        self._tg.start_soon(self._hold_result, asking, config.name, asking.held)

    def _held_on(self, endpoint: str) -> int:
        return sum(
            1
            for a in self._asking.values()
            if a.held is not None and a.task.server_endpoint == endpoint
        )

    async def _hold_result(self, asking: _Asking, server: str, held: anyio.CancelScope) -> None:
        task = asking.task
        reply: DetailedTask | None = None
        with held:
            try:
                connection = self._pool.connection(server)
                outcome = await legacy_wire.await_outcome(connection, task, HOLD_TIMEOUT_S)
                reply = await legacy_wire.fetch_task(connection, task, outcome=outcome)
            except Exception as exc:  # the next poll that sees input_required holds it again
                log.info("held tasks/result of %s ended early: %s", task.ref, _describe(exc))
        if asking.held is held:
            asking.held = None
        try:
            if held.cancel_called and asking.ended:  # a poll saw the task end first
                await self._delivered(asking, unless_open=True)
            elif reply is not None and not held.cancel_called:
                await self._delivered(asking)
                await self._scheduler.observe_pushed(task.ref, reply)
        except Exception:  # one task's trouble must never stop the requester
            log.exception("recording the held tasks/result of %s failed", task.ref)

    async def _delivered(self, asking: _Asking, *, unless_open: bool = False) -> None:
        """The task ended (the held ``tasks/result`` returned, or a poll saw a terminal
        status): the answers handed to the server reached it. Not when the task is still open
        (``unless_open``: it was lost, or only stopped being watched here)."""
        tenant = self._ledger.for_principal(asking.principal)
        if unless_open:
            current = await self._db(tenant.reads.get_task, asking.task.ref)
            if current.is_open or not current.status.is_terminal:
                return
        for input_ref in sorted(asking.handed):
            with contextlib.suppress(UnknownInputKey):  # already marked
                await self._db(tenant.inputs.mark_answer_delivered, asking.task.ref, input_ref)
        asking.handed.clear()

    # -- one server request -----------------------------------------------------------------------
    async def _answer(
        self,
        endpoint: str,
        context: ClientRequestContext,
        method: str,
        params: BaseModel,
        result_type: type[ResultT],
    ) -> ResultT | mcp_types.ErrorData:
        related = (context.meta or {}).get(legacy_wire.RELATED_TASK_META)
        task_id = related.get("taskId") if isinstance(related, dict) else None
        task_ref = self._by_handle.get((endpoint, task_id)) if isinstance(task_id, str) else None
        asking = self._asking.get(task_ref) if task_ref is not None else None
        if asking is None or task_id is None:
            return _error(mcp_types.INVALID_REQUEST, _NOT_ASKED[method])
        try:
            answer = await self._recorded_answer(asking, task_id, method, params)
            if isinstance(answer, mcp_types.ErrorData):
                return answer
            return result_type.model_validate(answer)
        except ValidationError:
            log.warning("the recorded answer to a %s of %s is not a valid result", method, task_ref)
            return _error(mcp_types.INTERNAL_ERROR, "the recorded answer is not a valid result")
        except Exception:  # one request's trouble must never stop the connection
            log.exception("answering a %s of %s failed", method, task_ref)
            return _error(mcp_types.INTERNAL_ERROR, "the client could not answer")

    async def _recorded_answer(
        self, asking: _Asking, task_id: str, method: str, params: BaseModel
    ) -> Any:
        fields = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        fields.pop("_meta", None)  # related-task: the raw task id, never stored
        key = legacy_input_key(method, fields)
        asked = DetailedTask(
            task_id=task_id,
            status=TaskStatus.INPUT_REQUIRED.value,
            input_requests={key: {"method": method, "params": fields}},
        )
        if not await self._scheduler.observe_pushed(asking.task.ref, asked):
            return _error(mcp_types.INTERNAL_ERROR, "the task is not watched here")
        tenant = self._ledger.for_principal(asking.principal)
        while not asking.ended:
            changed = asking.changed  # taken before the read: a wake-up in between is kept
            requests = await self._db(tenant.reads.input_requests, asking.task.ref)
            request = next((r for r in requests if r.key == key), None)
            if request is None:
                return _error(mcp_types.INTERNAL_ERROR, "the request was not recorded")
            if request.answer is not None:
                asking.handed.add(request.ref)
                return request.answer
            if _settled_without_answer(request):
                return _error(mcp_types.INVALID_REQUEST, "declined by the client")
            await changed.wait()
        return _error(mcp_types.INTERNAL_ERROR, "the task is no longer watched")


def _settled_without_answer(request: InputRequestView) -> bool:
    # Declined with no wire decline (sampling), or answered and delivered before: nothing kept.
    return request.declined_at_ms is not None or request.delivered_at_ms is not None


def _error(code: int, message: str) -> mcp_types.ErrorData:
    return mcp_types.ErrorData(code=code, message=message)


def _describe(exc: BaseException) -> str:
    # The server's message may quote the raw task id: only the code or the type is logged.
    if isinstance(exc, MCPError):
        return f"JSON-RPC error {exc.code}"
    return type(exc).__name__


def install_legacy_inputs(
    ledger: Ledger,
    db: LedgerRunner,
    pool: ServerPool,
    scheduler: PollScheduler,
    task_group: TaskGroup,
    handlers: InputHandlers | None = None,
) -> LegacyInputs:
    """Wire :class:`LegacyInputs` into a requester: around the scheduler's input hook, as its
    answer carrier, and as the pool's answerer of server requests (before any connection);
    an elicitation tied to no task goes to ``handlers`` (:mod:`.direct_elicitation`)."""
    legacy = LegacyInputs(ledger, db, pool, scheduler, task_group, scheduler.inputs, handlers)
    scheduler.inputs = legacy
    scheduler.answer_carrier = legacy
    pool.server_requests = legacy
    return legacy
