"""The attention inbox: everything of the principal that waits for a person, one card each.

An input request with a form schema gets a form generated from that schema
(:mod:`bridge.console._forms`) and three answers: accept (with the form's content), decline,
dismiss. A call whose outcome is unknown gets the two verdicts an operator can give; any other
kind links to its run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bridge.cli._records import short_time
from bridge.console._forms import form_fields, render_fields
from bridge.console._markup import Markup, attrs, html, join
from bridge.console._pages import Frame, csrf_input, layout


class AttentionLike(Protocol):
    """What the inbox reads of an attention item."""

    @property
    def kind(self) -> str: ...
    @property
    def run_ref(self) -> str: ...
    @property
    def response_id(self) -> str | None: ...
    @property
    def subject_ref(self) -> str: ...
    @property
    def input_ref(self) -> str | None: ...
    @property
    def summary(self) -> str: ...
    @property
    def requested_schema(self) -> Mapping[str, Any] | None: ...
    @property
    def since_ms(self) -> int: ...
    @property
    def next_step(self) -> str: ...


@dataclass(frozen=True, slots=True)
class FormProblem:
    """A refused answer, shown on its card: per-field messages, the rest, what was posted."""

    input_ref: str
    field_errors: dict[str, str] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)


KIND_TITLES = {
    "input_required": "Input required",
    "unknown_outcome": "Unknown outcome",
    "lost_task": "Lost task",
    "anomaly": "Anomaly",
    "unwatched_task": "Task nobody watches",
}


def answer_action(item: AttentionLike) -> str:
    """Where an input request's answer is posted."""
    return f"/runs/{item.run_ref}/inputs/{item.subject_ref}/{item.input_ref}/answer"


def _input_card(item: AttentionLike, frame: Frame, problem: FormProblem | None) -> Markup:
    fields = form_fields(item.requested_schema)
    general = join(
        html('<p class="error" role="alert">{}</p>', text)
        for text in (problem.general if problem else [])
    )
    controls = render_fields(
        fields,
        values=problem.values if problem else None,
        errors=problem.field_errors if problem else None,
        id_prefix=f"in-{item.input_ref}",
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


def _unknown_card(item: AttentionLike, frame: Frame) -> Markup:
    return html(
        '<form method="post" action="/runs/{}/calls/{}/resolve" class="inline">{}'
        '<button type="submit" name="admission" value="admitted">It ran (never resend)</button> '
        '<button type="submit" name="admission" value="not_admitted">It never ran (safe to '
        "resend)</button></form>",
        item.run_ref,
        item.subject_ref,
        csrf_input(frame),
    )


def _card(item: AttentionLike, frame: Frame, problem: FormProblem | None) -> Markup:
    kind = str(item.kind)
    action: Markup = html("")
    if kind == "input_required" and item.input_ref is not None:
        action = _input_card(item, frame, problem)
    elif kind == "unknown_outcome":
        action = _unknown_card(item, frame)
    return html(
        '<section class="card attention" data-kind="{}" data-subject="{}"{}>'
        '<h2>{} <small>{}</small></h2><p class="summary">{}</p>'
        '<p class="meta">run <a href="/runs/{}">{}</a> · response {} · since {} UTC</p>'
        '<p class="next">Next step: {}</p>{}</section>',
        kind,
        item.subject_ref,
        attrs(data_input=item.input_ref),
        KIND_TITLES.get(kind, kind),
        item.subject_ref,
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
    items: Sequence[AttentionLike],
    *,
    problem: FormProblem | None = None,
    flash: str | None = None,
) -> str:
    """Every item waiting for this principal, oldest first."""
    cards = [
        _card(item, frame, problem if problem and problem.input_ref == item.input_ref else None)
        for item in items
    ]
    body = html(
        "<h1>Inbox</h1>{}",
        join(cards)
        if cards
        else html('<p class="muted" id="inbox-empty">Nothing waits for you.</p>'),
    )
    return layout("Inbox", body, frame, flash=flash)
