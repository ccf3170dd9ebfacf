"""What the console does for a principal: the inbox (``Bridge.attention``), answering an input
request from its form, cancelling a task, giving the verdict on a call whose outcome is
unknown, acknowledging a lost task or an anomaly, closing an orphaned run.

Every action goes through the bridge's public API (:class:`~bridge.Bridge`,
:class:`~bridge.Run`), bound to the signed-in principal. An answer is built from the posted
form: :func:`bridge._answers.build_answer` turns the texts into the schema's types, and
the request's own ``accept`` checks the content against the whole schema before anything is
recorded; a refused answer re-renders the form with a message next to each field and sends
nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from bridge._errors import (
    AnswerRefused,
    InputAlreadyAnswered,
    InvalidAnswer,
    InvalidTransition,
    TaskWasLost,
    UnknownInputKey,
)
from bridge._facade import Bridge
from bridge._ledger.reads.attention import DEFAULT_ORPHAN_AFTER_MS, DEFAULT_OVERDUE_AFTER_MS
from bridge._ledger.reads.views import AttentionItem
from bridge._lifecycle import Admission, OuterStatus
from bridge._outcomes import AnswerDelivery, AnswerReceipt, InputRequest, elicit
from bridge.cli._records import Redactor
from bridge.console._forms import form_fields, posted_values
from bridge.console._inbox import FormProblem, inbox_page
from bridge.console._pages import Frame, message_page

log = logging.getLogger("bridge.console")

ANSWER_ACTIONS = ("accept", "decline", "dismiss")


class _Refused(Exception):
    """An answer refused before anything was recorded: one message per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class ConsoleActions:
    """The console's actions over one bridge (every one scoped to the frame's principal)."""

    def __init__(
        self,
        bridge: Bridge,
        *,
        overdue_after: float = DEFAULT_OVERDUE_AFTER_MS / 1000,
        orphan_after: float = DEFAULT_ORPHAN_AFTER_MS / 1000,
    ) -> None:
        self.bridge = bridge
        self.overdue_after = overdue_after  # seconds, as `bridge attention` takes them
        self.orphan_after = orphan_after

    async def items(self, principal: str) -> list[AttentionItem]:
        """What waits for ``principal`` (the public attention query), oldest first, with
        whatever quotes a raw task id redacted."""
        redactor = Redactor(await self.bridge.read(principal, lambda r: r.tasks(open_only=True)))
        return [
            replace(
                item,
                summary=redactor.text(item.summary),
                question=redactor.text(item.question) if item.question else None,
            )
            for item in await self.bridge.attention(
                principal, overdue_after=self.overdue_after, orphan_after=self.orphan_after
            )
        ]

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

    async def answer(
        self, frame: Frame, run_ref: str, owner_ref: str, input_ref: str, form: FormData
    ) -> Response:
        """Answer one input request from its posted form (once: a second post finds it
        answered and sends nothing; a lost task's request is refused and nothing is sent)."""
        run = self.bridge.run(frame.principal, run_ref)
        try:
            request = await run.pending_input(owner_ref, input_ref)
        except TaskWasLost as exc:
            page = message_page(frame, "Task lost", str(exc))
            return HTMLResponse(page, status_code=409)
        except (InputAlreadyAnswered, UnknownInputKey):
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
        said = str(action) if action != "accept" else "accept " + json.dumps(posted)
        confirm = {"done": done, "ref": input_ref, "run": run_ref, "answer": said[:200]}
        return RedirectResponse(f"/inbox?{urlencode(confirm)}", status_code=303)

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
        self,
        frame: Frame,
        run_ref: str,
        op_ref: str,
        admission: str | None,
        back: str | None = None,
    ) -> Response:
        """Record whether a call of unknown outcome was admitted by its server; back to the
        inbox when acted on from there, else to the run's page."""
        if admission not in (Admission.ADMITTED.value, Admission.NOT_ADMITTED.value):
            page = message_page(frame, "Refused", "Say whether the call ran or never ran.")
            return HTMLResponse(page, status_code=422)
        run = self.bridge.run(frame.principal, run_ref)
        await run.resolve_unknown_outcome(op_ref, Admission(admission), by=_by(frame))
        log.info("console verdict on %s by %s: %s", op_ref, frame.principal, admission)
        said = "it ran" if admission == Admission.ADMITTED.value else "it never ran"
        confirm = {"done": "resolved", "ref": op_ref, "run": run_ref, "answer": said}
        return _back(back, run_ref, confirm)

    async def acknowledge(
        self, frame: Frame, run_ref: str, ref: str | None, note: str | None
    ) -> Response:
        """Acknowledge a lost task or an anomaly of this run (recorded, naming who)."""
        if not ref:
            return HTMLResponse(message_page(frame, "Refused", "Nothing to acknowledge."), 422)
        try:
            await self.bridge.run(frame.principal, run_ref).acknowledge(
                ref, by=_by(frame), note=note or ""
            )
        except InvalidTransition as exc:
            return HTMLResponse(message_page(frame, "Not acknowledged", str(exc)), 409)
        log.info("console acknowledged %s by %s", ref, frame.principal)
        confirm = {"done": "acknowledged", "ref": ref, "run": run_ref}
        return RedirectResponse(f"/inbox?{urlencode(confirm)}", status_code=303)

    async def close_run(
        self,
        frame: Frame,
        run_ref: str,
        status: str | None,
        reason: str | None,
        back: str | None = None,
    ) -> Response:
        """Close an orphaned run with an end state and a reason; its tasks are left alone."""
        ends = [s.value for s in OuterStatus if s.is_terminal]
        if status not in ends or not (reason or "").strip():
            text = "Choose an end state and say why the run is closed."
            return HTMLResponse(message_page(frame, "Refused", text), 422)
        try:
            await self.bridge.run(frame.principal, run_ref).close(
                OuterStatus(status), reason=reason or "", by=_by(frame)
            )
        except InvalidTransition as exc:
            return HTMLResponse(message_page(frame, "Not closed", str(exc)), 409)
        log.info("console closed %s by %s as %s", run_ref, frame.principal, status)
        confirm = {"done": "closed", "ref": run_ref, "run": run_ref, "answer": f"{status}"}
        return _back(back, run_ref, confirm)


def _back(back: str | None, run_ref: str, confirm: dict[str, str]) -> Response:
    """Where an action returns: the inbox it was taken from, else the run's page; either way
    with a confirmation naming what was acted on."""
    where = "/inbox" if back == "inbox" else f"/runs/{run_ref}"
    return RedirectResponse(f"{where}?{urlencode(confirm)}", status_code=303)


def _by(frame: Frame) -> str:
    """Who acts from the console: its signed-in principal."""
    return f"console:{frame.principal}"
