"""What the console does for a principal: the inbox, answering an input request from its form,
cancelling a task, giving the verdict on a call whose outcome is unknown.

Every action goes through the bridge's public API (:class:`~bridge.Bridge`,
:class:`~bridge.Run`), bound to the signed-in principal. An answer is built from the posted
form: :func:`bridge._answers.build_answer` turns the texts into the schema's types, and
the request's own ``accept`` checks the content against the whole schema before anything is
recorded; a refused answer re-renders the form with a message next to each field and sends
nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from bridge._errors import (
    AnswerRefused,
    InputAlreadyAnswered,
    InvalidAnswer,
    NotFound,
    UnknownInputKey,
)
from bridge._facade import Bridge
from bridge._lifecycle import Admission
from bridge._outcomes import AnswerDelivery, AnswerReceipt, InputRequest, elicit
from bridge.console._forms import form_fields, posted_values
from bridge.console._inbox import FormProblem, inbox_page
from bridge.console._pages import Frame, message_page
from bridge.console._reads import ConsoleReads

log = logging.getLogger("bridge.console")

ANSWER_ACTIONS = ("accept", "decline", "dismiss")


@dataclass(frozen=True, slots=True)
class InboxItem:
    """An input request as the inbox shows it."""

    kind: str
    run_ref: str
    response_id: str | None
    subject_ref: str
    input_ref: str | None
    summary: str
    requested_schema: dict[str, Any] | None
    since_ms: int
    next_step: str


class _Refused(Exception):
    """An answer refused before anything was recorded: one message per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class ConsoleActions:
    """The console's actions over one bridge (every one scoped to the frame's principal)."""

    def __init__(self, bridge: Bridge, reads: ConsoleReads) -> None:
        self.bridge = bridge
        self.reads = reads

    async def items(self, principal: str) -> list[InboxItem]:
        """What waits for ``principal``, redacted: its input requests (oldest first), then its
        calls of unknown outcome with no final verdict."""
        redactor = await self.reads.redactor(principal)
        tenant = self.bridge._ledger.for_principal(principal)
        items = []
        for request in await self.bridge.pending_inputs(principal):
            owner = request.task_ref or request.op_ref or ""
            if request.task_ref is not None:
                task = await self.bridge._runner(tenant.get_task, request.task_ref)
                run_ref, response_id, since = task.run_ref, task.response_id, task.updated_at_ms
            else:
                call = await self.bridge._runner(tenant.get_dispatch, owner)
                run_ref, response_id, since = call.run_ref, None, call.updated_at_ms
            items.append(
                InboxItem(
                    kind="input_required",
                    run_ref=run_ref,
                    response_id=response_id,
                    subject_ref=owner,
                    input_ref=request.input_ref,
                    summary=redactor.text(request.message or request.method),
                    requested_schema=request.requested_schema,
                    since_ms=since,
                    next_step="answer the form, or decline / dismiss the request",
                )
            )
        for call in await self.reads.unresolved_calls(principal):
            items.append(
                InboxItem(
                    kind="unknown_outcome",
                    run_ref=call.run_ref,
                    response_id=None,
                    subject_ref=call.ref,
                    input_ref=None,
                    summary=redactor.text(
                        f"{call.server_name or call.server_endpoint}.{call.tool_name}: "
                        f"{call.unknown_reason or 'no reply'}"
                    ),
                    requested_schema=None,
                    since_ms=call.updated_at_ms,
                    next_step="say whether the server ran the call (never resent until then)",
                )
            )
        return items

    async def waiting(self, principal: str) -> int:
        """How many items wait for ``principal``."""
        return len(await self.items(principal))

    async def with_count(self, frame: Frame) -> Frame:
        """The frame with the number of items waiting (shown in the navigation)."""
        return replace(frame, attention_count=len(await self.items(frame.principal)))

    async def inbox(
        self, frame: Frame, *, problem: FormProblem | None = None, flash: str | None = None
    ) -> Response:
        """The inbox page (``422`` when it re-renders a refused answer)."""
        items = await self.items(frame.principal)
        frame = replace(frame, attention_count=len(items))
        page = inbox_page(frame, items, problem=problem, flash=flash)
        return HTMLResponse(page, status_code=422 if problem else 200)

    async def _pending(
        self, frame: Frame, run_ref: str, owner_ref: str, input_ref: str
    ) -> InputRequest | None:
        run = self.bridge.run(frame.principal, run_ref)
        await run.view()  # NotFound for another principal's run
        try:
            return await run.pending_input(owner_ref, input_ref)
        except (NotFound, UnknownInputKey, InputAlreadyAnswered):  # not waiting (any more)
            return None

    async def answer(
        self, frame: Frame, run_ref: str, owner_ref: str, input_ref: str, form: FormData
    ) -> Response:
        """Answer one input request from its posted form (once: a second post finds it
        answered and sends nothing)."""
        request = await self._pending(frame, run_ref, owner_ref, input_ref)
        if request is None:
            page = message_page(
                frame, "Already answered", f"{input_ref} is not waiting for an answer any more."
            )
            return HTMLResponse(page, status_code=409)
        action = form.get("action")
        if action not in ANSWER_ACTIONS:
            return await self._refused_answer(
                frame, input_ref, {}, ["Choose accept, decline or dismiss."]
            )
        fields = form_fields(request.requested_schema)
        posted = posted_values(fields, form)
        try:
            receipt = await self._send(request, str(action), posted)
        except _Refused as refused:
            return await self._refused_answer(frame, input_ref, posted, refused.problems, fields)
        except InputAlreadyAnswered:
            return RedirectResponse("/inbox?done=answered", status_code=303)
        except AnswerRefused as exc:
            problems = [f"The server refused the answer: {exc}"]
            return await self._refused_answer(frame, input_ref, posted, problems)
        log.info(
            "console answer %s on %s by %s: %s",
            input_ref,
            owner_ref,
            frame.principal,
            receipt.delivery.value,
        )
        done = "answered" if receipt.delivered else "queued"
        if receipt.delivery is AnswerDelivery.TASK_LOST:
            done = "lost"
        return RedirectResponse(f"/inbox?done={done}", status_code=303)

    async def _send(
        self, request: InputRequest, action: str, posted: dict[str, str]
    ) -> AnswerReceipt:
        """Check, record and send one answer (``_Refused``: nothing was recorded)."""
        try:
            wire = {"accept": "accept", "decline": "decline", "dismiss": "cancel"}[action]
            return await elicit(request, wire, texts=posted if action == "accept" else None)
        except InvalidAnswer as exc:
            raise _Refused(exc.problems) from None

    async def _refused_answer(
        self,
        frame: Frame,
        input_ref: str,
        posted: dict[str, str],
        problems: list[str],
        fields: list[Any] | None = None,
    ) -> Response:
        names = {f.name for f in fields or []}
        field_errors: dict[str, str] = {}
        general: list[str] = []
        for text in problems:
            name, sep, message = text.partition(": ")
            if sep and name in names and name not in field_errors:
                field_errors[name] = message
            else:
                general.append(text)
        refused = FormProblem(input_ref, field_errors, general, posted)
        return await self.inbox(frame, problem=refused)

    async def cancel(self, frame: Frame, run_ref: str, task_ref: str) -> Response:
        """Ask the task's server to cancel it (recorded first as intent)."""
        run = self.bridge.run(frame.principal, run_ref)
        await run.task(task_ref)  # NotFound for another principal's or another run's task
        acknowledged = await run.cancel_task(task_ref)
        log.info(
            "console cancel %s by %s: acknowledged=%s", task_ref, frame.principal, acknowledged
        )
        return RedirectResponse(f"/runs/{run_ref}?done=cancel", status_code=303)

    async def resolve_call(
        self, frame: Frame, run_ref: str, op_ref: str, admission: str | None
    ) -> Response:
        """Record whether a call of unknown outcome was admitted by its server."""
        if admission not in (Admission.ADMITTED.value, Admission.NOT_ADMITTED.value):
            page = message_page(frame, "Refused", "Say whether the call ran or never ran.")
            return HTMLResponse(page, status_code=422)
        run = self.bridge.run(frame.principal, run_ref)
        await run.resolve_unknown_outcome(op_ref, Admission(admission))
        log.info("console verdict on %s by %s: %s", op_ref, frame.principal, admission)
        return RedirectResponse(f"/runs/{run_ref}?done=resolved", status_code=303)
