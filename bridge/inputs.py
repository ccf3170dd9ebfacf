"""Typed input requests: what a task asks the host (elicitation, sampling, …) and the helpers
that answer it.

An :class:`InputRequest` comes from a ``task.input_required`` event, or a
``call.input_required`` event (a server that asked before creating any task: MRTR), through
``Bridge.input_request(principal, event)``, or from ``Bridge.pending_inputs(principal)``.
For an elicitation (``elicitation/create``) ``accept(content)`` / ``decline()`` / ``cancel()``
send the MCP ``ElicitResult`` shape::

    {"action": "accept", "content": {...}}   {"action": "decline"}   {"action": "cancel"}

``accept`` validates ``content`` against the request's ``requestedSchema`` first: a bad answer
raises :class:`~bridge.errors.InvalidInputAnswer` and nothing is recorded or sent. Other
methods (``sampling/createMessage``) take a raw result through ``Bridge.answer_input``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bridge.errors import InvalidInputAnswer

if TYPE_CHECKING:  # bridge.mcp.outcomes carries InputRequest: no import back at runtime
    from bridge.mcp.outcomes import AnswerReceipt

ELICITATION = "elicitation/create"
SAMPLING = "sampling/createMessage"

# Sends one raw answer through the bridge (bound to principal, task and input request).
AnswerSender = Callable[[Any], Awaitable["AnswerReceipt"]]


@dataclass(frozen=True, slots=True)
class InputRequest:
    """One input request of one task, or of a call that has no task yet (MRTR: ``task_ref``
    is None and ``op_ref`` names the call; answering it sends the call again), as the host
    answers it."""

    principal: str
    task_ref: str | None
    input_ref: str  # the bridge reference (the server's key may embed the raw task id)
    method: str  # "elicitation/create", "sampling/createMessage", …
    params: dict[str, Any] = field(repr=False)  # server text, shown to the user
    _send: AnswerSender = field(repr=False, compare=False)
    op_ref: str | None = None  # set for an MRTR input (a call's, before any task)

    @property
    def message(self) -> str | None:
        """The question for the user (elicitation), if any."""
        message = self.params.get("message")
        return message if isinstance(message, str) else None

    @property
    def requested_schema(self) -> dict[str, Any] | None:
        """The JSON schema an accepted elicitation's ``content`` must match (form mode)."""
        schema = self.params.get("requestedSchema")
        return schema if isinstance(schema, dict) else None

    async def accept(self, content: dict[str, Any] | None = None) -> AnswerReceipt:
        """Accept, with ``content`` matching :attr:`requested_schema` (checked before anything
        is recorded). A URL-mode elicitation has no schema and takes no content."""
        self._require_elicitation("accept")
        schema = self.requested_schema
        if schema is None:
            if content is not None:
                raise InvalidInputAnswer(self.input_ref, "this request takes no content")
            return await self._send({"action": "accept"})
        if content is None:
            raise InvalidInputAnswer(self.input_ref, "accepting needs content for the schema")
        self._validate(schema, content)
        return await self._send({"action": "accept", "content": content})

    async def decline(self) -> AnswerReceipt:
        """The user explicitly said no."""
        self._require_elicitation("decline")
        return await self._send({"action": "decline"})

    async def cancel(self) -> AnswerReceipt:
        """The user dismissed the request without choosing."""
        self._require_elicitation("cancel")
        return await self._send({"action": "cancel"})

    async def respond(self, result: Any) -> AnswerReceipt:
        """Send the method's own result shape as is (``sampling/createMessage``: a
        ``CreateMessageResult`` dumped to JSON), unchecked, like ``Bridge.answer_input``."""
        return await self._send(result)

    def _require_elicitation(self, action: str) -> None:
        if self.method != ELICITATION:
            raise InvalidInputAnswer(
                self.input_ref,
                f"{action}() answers {ELICITATION}; answer {self.method} with "
                "Bridge.answer_input and the method's own result",
            )

    def _validate(self, schema: dict[str, Any], content: dict[str, Any]) -> None:
        import jsonschema  # loaded on first use: ``import bridge`` stays light

        validator_class = jsonschema.validators.validator_for(schema)
        try:
            validator_class.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise InvalidInputAnswer(
                self.input_ref, f"the server's requested schema is invalid: {exc.message}"
            ) from None
        error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(content))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "content"
            raise InvalidInputAnswer(self.input_ref, f"{where}: {error.message}")
