"""The attention inbox: everything of the principal that waits for a person, one card per
item of :meth:`bridge.Bridge.attention`, each with its action.

An input request (waiting or overdue) shows its question and gets a form generated from its
schema (:mod:`bridge.console._forms`) and three answers: accept (with the form's content),
decline, dismiss. A call whose outcome is unknown gets the two verdicts; a lost task and an
anomaly an acknowledgement; an orphaned run a close form (an end state and a reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bridge._ledger.reads.views import AttentionItem
from bridge._lifecycle import OuterStatus
from bridge.cli._records import short_time
from bridge.console._forms import form_fields, render_fields
from bridge.console._markup import Markup, attrs, html, join
from bridge.console._pages import Frame, csrf_input, layout


@dataclass(frozen=True, slots=True)
class FormProblem:
    """A refused answer, shown on its card: per-field messages, the rest, what was posted."""

    input_ref: str
    field_errors: dict[str, str] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)


KIND_TITLES = {
    "input_waiting": "Input waiting",
    "input_overdue": "Input overdue",
    "unknown_outcome": "Unknown outcome",
    "lost_task": "Lost task",
    "anomaly": "Anomaly",
    "orphaned_run": "Orphaned run",
}
INPUT_KINDS = ("input_waiting", "input_overdue")
_END_STATES = [s.value for s in OuterStatus if s.is_terminal]


def owner_of(item: AttentionItem) -> str:
    """The task or call an input request belongs to."""
    return item.task_ref or item.op_ref or ""


def answer_action(item: AttentionItem) -> str:
    """Where an input request's answer is posted."""
    return f"/runs/{item.run_ref}/inputs/{owner_of(item)}/{item.ref}/answer"


def _input_card(item: AttentionItem, frame: Frame, problem: FormProblem | None) -> Markup:
    fields = form_fields(item.requested_schema)
    general = join(
        html('<p class="error" role="alert">{}</p>', text)
        for text in (problem.general if problem else [])
    )
    controls = render_fields(
        fields,
        values=problem.values if problem else None,
        errors=problem.field_errors if problem else None,
        id_prefix=f"in-{item.ref}",
    )
    accept_label = "Accept and send" if fields else "Accept"
    return html(
        '<form method="post" action="{}" class="answer" novalidate>{}{}{}'
        '<div class="buttons"><button type="submit" name="action" value="accept" '
        'class="primary">{}</button> <button type="submit" name="action" value="decline">'
        'Decline</button> <button type="submit" name="action" value="dismiss">Dismiss</button>'
        "</div></form>",
        answer_action(item),
        csrf_input(frame),
        general,
        controls,
        accept_label,
    )


def _unknown_card(item: AttentionItem, frame: Frame) -> Markup:
    return html(
        '<form method="post" action="/runs/{}/calls/{}/resolve" class="inline">{}'
        '<input type="hidden" name="back" value="inbox">'
        '<button type="submit" name="admission" value="admitted">It ran (never resend)</button> '
        '<button type="submit" name="admission" value="not_admitted">It never ran (safe to '
        "resend)</button></form>",
        item.run_ref,
        item.ref,
        csrf_input(frame),
    )


def _ack_card(item: AttentionItem, frame: Frame) -> Markup:
    return html(
        '<form method="post" action="/runs/{}/acknowledge" class="inline">{}'
        '<input type="hidden" name="ref" value="{}">'
        '<label>What you found <input type="text" name="note" maxlength="500"></label> '
        '<button type="submit" data-action="acknowledge">Acknowledge</button></form>',
        item.run_ref,
        csrf_input(frame),
        item.ref,
    )


def _close_card(item: AttentionItem, frame: Frame) -> Markup:
    options = join(
        html('<option value="{}"{}>{}</option>', s, attrs(selected=s == "failed"), s)
        for s in _END_STATES
    )
    return html(
        '<form method="post" action="/runs/{}/close" class="inline">{}'
        '<input type="hidden" name="back" value="inbox">'
        '<label>End state <select name="status">{}</select></label> '
        '<label>Reason <input type="text" name="reason" required maxlength="500"></label> '
        '<button type="submit" class="danger" data-action="close">Close the run (its tasks '
        "are left alone)</button></form>",
        item.run_ref,
        csrf_input(frame),
        options,
    )


def _card(item: AttentionItem, frame: Frame, problem: FormProblem | None) -> Markup:
    kind = str(item.kind)
    action: Markup = html("")
    question: Markup = html("")
    if kind in INPUT_KINDS:
        action = _input_card(item, frame, problem)
        if item.question:
            question = html('<p class="question">{}</p>', item.question)
    elif kind == "unknown_outcome":
        action = _unknown_card(item, frame)
    elif kind in ("lost_task", "anomaly"):
        action = _ack_card(item, frame)
    elif kind == "orphaned_run":
        action = _close_card(item, frame)
    return html(
        '<section class="card attention" data-kind="{}" data-subject="{}"{}>'
        '<h2>{} <small>{}</small></h2>{}<p class="summary">{}</p>'
        '<p class="meta">run <a href="/runs/{}">{}</a> · response {} · since {} UTC</p>'
        '<p class="next">Next step: {}</p>{}</section>',
        kind,
        owner_of(item) if kind in INPUT_KINDS else item.ref,
        attrs(data_input=item.ref if kind in INPUT_KINDS else None),
        KIND_TITLES.get(kind, kind),
        item.ref,
        question,
        item.summary,
        item.run_ref,
        item.run_ref,
        item.response_id or "-",
        short_time(item.since_ms),
        item.next_step,
        action,
    )


def inbox_page(
    frame: Frame,
    items: Sequence[AttentionItem],
    *,
    problem: FormProblem | None = None,
    flash: str | None = None,
) -> str:
    """Every item waiting for this principal, oldest first."""
    cards = [
        _card(item, frame, problem if problem and problem.input_ref == item.ref else None)
        for item in items
    ]
    body = html(
        "<h1>Inbox</h1>{}",
        join(cards)
        if cards
        else html('<p class="muted" id="inbox-empty">Nothing waits for you.</p>'),
    )
    return layout("Inbox", body, frame, flash=flash)
