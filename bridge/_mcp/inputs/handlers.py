"""Typed handlers for the input requests a server asks (form and URL elicitation, sampling),
and the one function that applies them: :meth:`InputHandlers.handle`.

Register them as ``BridgeSettings(input_handlers=InputHandlers(...))``, optionally per server.
Each kind is one of:

* a **handler** — the bridge calls it when the request is first recorded and sends its answer;
* :data:`HOST` — the host answers it itself (``task.input_required`` events,
  ``Bridge.pending_inputs``, :class:`~bridge.InputRequest`): today's way, and the
  default for form elicitation;
* ``None`` — not answered at all.

A kind is *declared* to a server (``elicitation.form`` / ``elicitation.url`` / ``sampling`` in
each request's ``io.modelcontextprotocol/clientCapabilities``) exactly when it is a handler or
:data:`HOST` for that server. A request of an undeclared kind (a server that ignored the
declaration) gets the input policy's conservative default, decline
(:class:`~bridge.InputPolicy`); ``leave_pending`` keeps it for the host instead.

Trust: a handler's answer is checked before anything is recorded or sent — an accepted form
against the request's ``requestedSchema`` (the same check as ``InputRequest.accept``), a URL
elicitation takes no content, a sampling handler must return a ``CreateMessageResult``. A
handler that raises or answers badly is recorded as ``task.input_handler_failed`` (a call's
MRTR input: ``call.input_handler_failed``; nothing it returned is written), then the policy
declines the request (default) or leaves it pending for the host. The bridge never opens a
URL: a URL handler decides, typically by showing it to the user.

A call's MRTR inputs (before any task) go through the same handlers, see
:mod:`bridge._mcp.inputs.call_round_handlers` (a declined sampling request of a call stays with the
host).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar

import mcp_types
import pydantic

from bridge import events as ev
from bridge._errors import BridgeError, InvalidAnswer
from bridge._ledger.runner import LedgerRunner
from bridge._mcp.wire.input_capabilities import InputCapabilities
from bridge._outcomes import ELICITATION, SAMPLING, InputRequest
from bridge._policies import InputPolicy, UnansweredInput

_Params = TypeVar("_Params", bound=pydantic.BaseModel)
_log = logging.getLogger(__name__)


class InputKind(StrEnum):
    FORM_ELICITATION = "form_elicitation"
    URL_ELICITATION = "url_elicitation"
    SAMPLING = "sampling"
    OTHER = "other"  # roots/list, or a method this bridge does not know: never declared


def input_kind(method: str, params: Mapping[str, Any]) -> InputKind:
    if method == ELICITATION:
        # An elicitation without a mode is a form (the spec's default).
        url = params.get("mode") == "url"
        return InputKind.URL_ELICITATION if url else InputKind.FORM_ELICITATION
    return InputKind.SAMPLING if method == SAMPLING else InputKind.OTHER


# -- what an elicitation handler answers -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class Accept:
    """Accept; a form needs ``content`` matching its schema, a URL elicitation takes none."""

    content: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Decline:
    """The user explicitly said no."""


@dataclass(frozen=True, slots=True)
class Dismiss:
    """The user dismissed the request without choosing."""


ElicitAnswer = Accept | Decline | Dismiss


# -- what a handler receives -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FormElicitation:
    """A form-mode ``elicitation/create`` as an input handler sees it: the question, the JSON schema
    the answer must match, and where it came from."""

    message: str
    requested_schema: dict[str, Any]
    server: str  # the configured server name
    task_ref: str | None  # None: asked by a call before any task (MRTR; see op_ref)
    input_ref: str
    op_ref: str | None = None


@dataclass(frozen=True, slots=True)
class UrlElicitation:
    """The user is asked to visit ``url`` (server-chosen: show it, never open it blindly)."""

    message: str
    url: str
    server: str
    task_ref: str | None  # None: asked by a call before any task (MRTR; see op_ref)
    input_ref: str
    op_ref: str | None = None


FormHandler = Callable[[FormElicitation], Awaitable[ElicitAnswer]]
UrlHandler = Callable[[UrlElicitation], Awaitable[ElicitAnswer]]
SamplingHandler = Callable[
    [mcp_types.CreateMessageRequestParams],
    Awaitable[mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools],
]


class HostAnswers:
    """The host answers this kind itself (``pending_inputs`` / ``InputRequest``)."""

    _instance: HostAnswers | None = None

    def __new__(cls) -> HostAnswers:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "HOST"


HOST: Final = HostAnswers()
"""A handler slot's value meaning "the host answers this kind itself" (through
``Bridge.pending_inputs`` / ``Run.answer``): declared to the server, never answered here."""


class InputHandling(StrEnum):
    """What :meth:`InputHandlers.handle` did with one request."""

    ANSWERED = "answered"  # the handler's answer was recorded and sent
    LEFT_FOR_HOST = "left_for_host"  # HOST, or an undeclared kind under leave_pending
    DECLINED = "declined"  # the policy's default was applied (undeclared, or handler failed)
    LEFT_PENDING = "left_pending"  # the handler failed; kept for the host (policy)


# (owner ref, input ref, failure, detail, action): the ledger's record of a failed handler
RecordHandlerFailed = Callable[[str, str, ev.HandlerFailure, str, ev.HandlerFailedAction], None]


class InputDecisions(ABC):
    """Where the bridge's own decisions about one request are recorded: the task's
    (:mod:`bridge._mcp.inputs.task_input_handlers`) or, for an MRTR input, the call's
    (:mod:`bridge._mcp.inputs.call_round_handlers`)."""

    def __init__(self, db: LedgerRunner, record_handler_failed: RecordHandlerFailed) -> None:
        self._db = db
        self._record_handler_failed = record_handler_failed

    @abstractmethod
    def owner_of(self, request: InputRequest) -> str:
        """The reference the request is recorded under (its task's, or its call's)."""

    @abstractmethod
    async def decline(
        self,
        request: InputRequest,
        reason: ev.DeclineReason,
        answer: dict[str, Any] | None,
    ) -> None:
        """Record the bridge's decline (``answer``: the kind's wire decline, if it has one)."""

    async def handler_failed(
        self,
        request: InputRequest,
        failure: ev.HandlerFailure,
        detail: str,
        action: ev.HandlerFailedAction,
    ) -> None:
        """Record that the host's handler gave no usable answer, and what the policy did."""
        record, owner = self._record_handler_failed, self.owner_of(request)
        await self._db(record, owner, request.input_ref, failure, detail, action)


class _HandlerFailed(Exception):
    def __init__(self, failure: ev.HandlerFailure, detail: str) -> None:
        super().__init__(detail)
        self.failure: ev.HandlerFailure = failure
        self.detail = detail


@dataclass(frozen=True, slots=True)
class InputHandlers:
    """The input handlers of a bridge; ``per_server`` replaces the whole set for one server
    (by configured name)."""

    form: FormHandler | HostAnswers | None = HOST
    url: UrlHandler | HostAnswers | None = None
    sampling: SamplingHandler | HostAnswers | None = None
    per_server: Mapping[str, InputHandlers] = field(default_factory=dict)

    def for_server(self, server: str) -> InputHandlers:
        """The handlers for ``server`` (a per-server set, else these)."""
        return self.per_server.get(server, self)

    def capabilities_for(self, server: str) -> InputCapabilities:
        """What the bridge declares to ``server``: each kind someone will answer."""
        chosen = self.for_server(server)
        return InputCapabilities(
            form_elicitation=chosen.form is not None,
            url_elicitation=chosen.url is not None,
            sampling=chosen.sampling is not None,
        )

    def _handler(self, kind: InputKind) -> object | None:
        if kind is InputKind.FORM_ELICITATION:
            return self.form
        if kind is InputKind.URL_ELICITATION:
            return self.url
        return self.sampling if kind is InputKind.SAMPLING else None

    async def handle(
        self,
        request: InputRequest,
        *,
        server: str,
        policy: InputPolicy,
        decisions: InputDecisions,
    ) -> InputHandling:
        """Apply the handler registered for this request's kind on ``server``, once, where the
        request is first recorded. Everything the bridge decides is recorded through
        ``decisions``; an answer goes through ``request`` (recorded, then sent)."""
        kind = input_kind(request.method, request.params)
        handler = self.for_server(server)._handler(kind)
        if handler is HOST:
            return InputHandling.LEFT_FOR_HOST
        if handler is None:
            if policy.undeclared is UnansweredInput.LEAVE_PENDING:
                return InputHandling.LEFT_FOR_HOST
            await decisions.decline(request, "undeclared", _decline_answer(kind))
            return InputHandling.DECLINED
        try:
            await _answer_with(kind, handler, request, server)
        except _HandlerFailed as failed:
            failure, detail = failed.failure, failed.detail
            if policy.handler_failed is UnansweredInput.LEAVE_PENDING:
                await decisions.handler_failed(request, failure, detail, "left_pending")
                return InputHandling.LEFT_PENDING
            await decisions.handler_failed(request, failure, detail, "declined")
            await decisions.decline(request, "handler_failed", _decline_answer(kind))
            return InputHandling.DECLINED
        return InputHandling.ANSWERED


async def handle_in_background(
    handlers: InputHandlers,
    request: InputRequest,
    *,
    server: str,
    policy: InputPolicy,
    decisions: InputDecisions,
) -> None:
    """:meth:`InputHandlers.handle` as a task of its own (a task's or a call's input): one
    request's trouble is logged, never raised into the requester's task group."""
    try:
        await handlers.handle(request, server=server, policy=policy, decisions=decisions)
    except BridgeError as exc:  # e.g. answered meanwhile by the host, or refused
        _log.info("input request %s: %s", request.input_ref, exc)
    except Exception:  # a request must never stop the requester
        _log.exception("handling input request %s failed", request.input_ref)


def _decline_answer(kind: InputKind) -> dict[str, Any] | None:
    """The wire decline of this kind, or None when it has none (nothing is sent)."""
    if kind in (InputKind.FORM_ELICITATION, InputKind.URL_ELICITATION):
        return {"action": "decline"}
    return None


async def _answer_with(kind: InputKind, handler: Any, request: InputRequest, server: str) -> None:
    if kind is InputKind.SAMPLING:
        params = _parse(mcp_types.CreateMessageRequestParams, request.params)
        result = await _call(handler, params)
        if not isinstance(
            result, mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools
        ):
            detail = f"expected a CreateMessageResult, got {type(result).__name__}"
            raise _HandlerFailed("invalid_answer", detail)
        await request.respond(result.model_dump(by_alias=True, mode="json", exclude_none=True))
        return
    asked_by = (server, request.task_ref, request.input_ref, request.op_ref)
    if kind is InputKind.URL_ELICITATION:
        url_params = _parse(mcp_types.ElicitRequestURLParams, request.params)
        asked: FormElicitation | UrlElicitation = UrlElicitation(
            url_params.message, url_params.url, *asked_by
        )
    else:
        form_params = _parse(mcp_types.ElicitRequestFormParams, request.params)
        asked = FormElicitation(form_params.message, form_params.requested_schema, *asked_by)
    answer = await _call(handler, asked)
    try:
        if isinstance(answer, Accept):
            await request.accept(answer.content)
        elif isinstance(answer, Decline):
            await request.decline()
        elif isinstance(answer, Dismiss):
            await request.dismiss()
        else:
            detail = f"expected Accept, Decline or Dismiss, got {type(answer).__name__}"
            raise _HandlerFailed("invalid_answer", detail)
    except InvalidAnswer as exc:  # raised before anything is recorded
        raise _HandlerFailed("invalid_answer", exc.detail) from None


def _parse(model: type[_Params], params: Mapping[str, Any]) -> _Params:
    try:
        return model.model_validate(dict(params))
    except pydantic.ValidationError as exc:
        detail = f"{model.__name__}: {exc.errors()[0]['msg']}"
        raise _HandlerFailed("invalid_request", detail) from None


async def _call(handler: Any, asked: object) -> object:
    try:
        answer: object = await handler(asked)
    except Exception as exc:
        raise _HandlerFailed("raised", f"{type(exc).__name__}: {exc}") from None
    return answer
