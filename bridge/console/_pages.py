"""The console's page frame and its small pages: layout, login, runs list, messages.

Every page is rendered from :mod:`bridge.console._markup` snippets (values escaped on the way
in). What a page shows is already scoped to the signed-in principal and redacted by the caller;
nothing here reads the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bridge._ledger.reads.views import RunView
from bridge.cli._records import short_time
from bridge.console._markup import Markup, attrs, html, join

STATUS_FILTERS = ("any", "open", "in_progress", "completed", "failed", "incomplete", "cancelled")


@dataclass(frozen=True, slots=True)
class Frame:
    """What every page of a signed-in principal carries."""

    principal: str
    csrf: str
    attention_count: int | None = None


def status_badge(status: str | None) -> Markup:
    """A run's or task's status as a coloured badge."""
    name = status or "pending"
    return html('<span class="badge" data-status="{}">{}</span>', name, name)


def csrf_input(frame: Frame) -> Markup:
    """The hidden field carrying the session's CSRF token (in every POST form)."""
    return html('<input type="hidden" name="csrf" value="{}">', frame.csrf)


def layout(title: str, body: Markup, frame: Frame | None, *, flash: str | None = None) -> str:
    """A whole page: head (stylesheet and script of this console only), nav, flash, body."""
    nav: Markup = html("")
    if frame is not None:
        count = html(
            ' <span class="count" id="attention-count"{}>{}</span>',
            attrs(hidden=not frame.attention_count),
            frame.attention_count or 0,
        )
        nav = html(
            '<nav><a href="/inbox">Inbox{}</a> <a href="/runs">Runs</a>'
            '<span class="who">signed in as <b>{}</b></span>'
            '<form method="post" action="/logout" class="inline">{}'
            '<button type="submit">Sign out</button></form></nav>',
            count,
            frame.principal,
            csrf_input(frame),
        )
    notice = html('<p class="flash" role="status">{}</p>', flash) if flash else ""
    meta = html('<meta name="csrf-token" content="{}">', frame.csrf) if frame else ""
    page = html(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">{}'
        "<title>{} · bridge console</title>"
        '<link rel="stylesheet" href="/static/console.css">'
        '<script src="/static/console.js" defer></script></head>'
        "<body><header><b>bridge console</b>{}</header><main>{}{}</main></body></html>\n",
        meta,
        title,
        nav,
        notice,
        body,
    )
    return str(page)


def login_page(error: str | None = None) -> str:
    """The sign-in form: a principal's console token, posted once for a session cookie."""
    problem = html('<p class="error" role="alert">{}</p>', error) if error else ""
    body = html(
        "<h1>Sign in</h1>{}"
        '<form method="post" action="/login" class="card" novalidate>'
        '<label for="token">Console token</label> '
        '<input id="token" name="token" type="password" autocomplete="off" autofocus>'
        ' <button type="submit">Sign in</button>'
        '<p class="help">The token your operator set up for your principal. It is checked, '
        "never stored: the console keeps a signed session cookie instead.</p></form>",
        problem,
    )
    return layout("Sign in", body, None)


def message_page(frame: Frame | None, title: str, text: str, *, back: str = "/inbox") -> str:
    """A short page saying what happened (an error, a refusal) and where to go back."""
    body = html('<h1>{}</h1><p class="error">{}</p><p><a href="{}">Back</a></p>', title, text, back)
    return layout(title, body, frame)


@dataclass(frozen=True, slots=True)
class RunRow:
    """One line of the runs list."""

    run: RunView
    tasks: int
    open_tasks: int
    attention: int


def runs_page(
    frame: Frame, rows: Sequence[RunRow], *, query: str, status: str, scanned: int
) -> str:
    """The runs list with its search box and status filter."""
    options = join(
        html("<option{}>{}</option>", attrs(value=name, selected=name == status), name)
        for name in STATUS_FILTERS
    )
    search = html(
        '<form method="get" action="/runs" class="card filters">'
        '<label for="q">Search</label> <input id="q" name="q" value="{}" '
        'placeholder="run_…, resp_…, hsess…, server, tool">'
        ' <label for="status">Status</label> <select id="status" name="status">{}</select>'
        ' <button type="submit">Filter</button></form>',
        query,
        options,
    )
    lines = [
        html(
            '<tr><td><a href="/runs/{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td>'
            "<td>{}/{}</td><td>{}</td><td>{}</td></tr>",
            row.run.ref,
            row.run.ref,
            row.run.response_id or "-",
            row.run.uhp_server,
            status_badge(row.run.status.value if row.run.status else None),
            row.open_tasks,
            row.tasks,
            html('<a href="/inbox">{} waiting</a>', row.attention) if row.attention else "-",
            short_time(row.run.updated_at_ms),
        )
        for row in rows
    ]
    table = (
        html(
            '<table class="runs"><thead><tr><th>run</th><th>response</th><th>UHP server</th>'
            "<th>status</th><th>open/tasks</th><th>attention</th><th>updated (UTC)</th></tr>"
            "</thead><tbody>{}</tbody></table>",
            join(lines),
        )
        if rows
        else html('<p class="muted">No run matches.</p>')
    )
    note = html(
        '<p class="muted">{} of the {} most recently updated runs of this principal.</p>',
        len(rows),
        scanned,
    )
    return layout("Runs", html("<h1>Runs</h1>{}{}{}", search, table, note), frame)
