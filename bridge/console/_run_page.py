"""A run's page: its outer response, its calls and nested tasks with their actions, and the
two-lane timeline (outer response; nested tasks), all of it re-rendered live.

The timeline is the CLI's model (:func:`bridge.cli._timeline.build_timeline`) drawn by the CLI's
SVG renderer (:func:`bridge.cli._html_timeline.render_svg`): one outer lane built from the outer
events only, one lane per task from that task's events only. :func:`live_fragment` is what
the page shows inside its live area and what the SSE stream sends again after each change.
"""

from __future__ import annotations

from bridge._lifecycle import CallState, TaskStatus
from bridge.cli._html_timeline import legend, render_svg
from bridge.cli._records import RunSnapshot, relative, short_time, task_verdicts
from bridge.cli._timeline import Timeline
from bridge.console._markup import Markup, html, join
from bridge.console._pages import Frame, csrf_input, layout, status_badge


def _task_rows(snapshot: RunSnapshot, frame: Frame) -> Markup:
    red = snapshot.redactor.text
    rows = []
    for task in snapshot.tasks:
        actions: list[Markup] = []
        if task.is_open and task.cancel_requested_at_ms is None:
            actions.append(
                html(
                    '<form method="post" action="/runs/{}/tasks/{}/cancel" class="inline">{}'
                    '<button type="submit" class="danger" data-action="cancel">Cancel task'
                    "</button></form>",
                    task.run_ref,
                    task.ref,
                    csrf_input(frame),
                )
            )
        pending = snapshot.pending_inputs.get(task.ref, [])
        lost = task.lost_reason is not None and task.terminal_at_ms is None
        if pending and not lost:
            actions.append(html('<a href="/inbox">{} input(s) waiting</a>', len(pending)))
        shown = "lost" if lost else task.status.value  # lost: waiting for nothing any more
        message = task.status_message or ""
        answered = [r for r in snapshot.inputs.get(task.ref, []) if r.delivered_at_ms]
        if task.status is TaskStatus.INPUT_REQUIRED and answered and not pending and not lost:
            # Not waiting on a person any more: on the server, until a poll sees it move.
            message = "answer delivered; waiting for the server to move on" + (
                f" ({message})" if message else ""
            )
        rows.append(
            html(
                '<tr data-task="{}"><td>{}</td><td>{}.{}</td><td>{}</td><td>{}</td><td>{}</td>'
                "<td>{}</td></tr>",
                task.ref,
                task.ref,
                task.server_label,
                task.tool_name,
                status_badge(shown),
                red(message),
                red(", ".join(task_verdicts(task))) or "-",
                join(actions, " ") or "-",
            )
        )
    if not rows:
        return html('<p class="muted">No nested task.</p>')
    return html(
        '<table class="tasks"><thead><tr><th>task</th><th>tool</th><th>status</th>'
        "<th>message</th><th>verdicts</th><th>actions</th></tr></thead><tbody>{}</tbody></table>",
        join(rows),
    )


def _unknown_calls(snapshot: RunSnapshot, frame: Frame) -> Markup:
    verdicts = {ref: v.value for ref, v in snapshot.verdicts.items() if v.is_final}
    rows = []
    for call in snapshot.dispatches:
        if call.state is not CallState.UNKNOWN:
            continue
        if call.ref in verdicts:  # given once: shown, not asked again
            rows.append(
                html(
                    '<tr data-call="{}" data-verdict="{}"><td>{}</td><td>{}.{}</td><td>{}</td>'
                    "<td>verdict: <b>{}</b></td></tr>",
                    call.ref,
                    verdicts[call.ref],
                    call.ref,
                    call.server_name or call.server_endpoint,
                    call.tool_name,
                    snapshot.redactor.text(call.unknown_reason or "-"),
                    verdicts[call.ref],
                )
            )
            continue
        rows.append(
            html(
                '<tr data-call="{}"><td>{}</td><td>{}.{}</td><td>{}</td><td>'
                '<form method="post" action="/runs/{}/calls/{}/resolve" class="inline">{}'
                '<button type="submit" name="admission" value="admitted">It ran (never resend)'
                '</button> <button type="submit" name="admission" value="not_admitted">'
                "It never ran (safe to resend)</button></form></td></tr>",
                call.ref,
                call.ref,
                call.server_name or call.server_endpoint,
                call.tool_name,
                snapshot.redactor.text(call.unknown_reason or "-"),
                call.run_ref,
                call.ref,
                csrf_input(frame),
            )
        )
    if not rows:
        return html("")
    return html(
        "<h2>Calls with an unknown outcome</h2>"
        '<table class="calls"><thead><tr><th>call</th><th>tool</th><th>why unknown</th>'
        "<th>what the server did</th></tr></thead><tbody>{}</tbody></table>",
        join(rows),
    )


def _events_table(timeline: Timeline) -> Markup:
    rows = [
        html(
            '<tr data-seq="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
            event["seq"],
            event["seq"],
            relative(event["rel_ms"]),
            "outer" if event["lane"] == "outer" else event["lane"],
            event["type"],
            event["summary"],
        )
        for event in timeline.record()["events"]  # redacted by the model
    ]
    return html(
        '<table class="events"><thead><tr><th>#</th><th>t</th><th>lane</th><th>event</th>'
        "<th>details</th></tr></thead><tbody>{}</tbody></table>",
        join(reversed(rows)),
    )


def live_fragment(snapshot: RunSnapshot, timeline: Timeline, frame: Frame) -> Markup:
    """Everything on the run page that changes: status line, tasks, calls, timeline, events."""
    run = snapshot.run
    red = snapshot.redactor.text
    status = run.status.value if run.status is not None else None
    return html(
        '<p class="meta">outer response <b>{}</b> · session {} · UHP server {} · status '
        '<span id="run-status">{}</span> · {} events · last change {} UTC</p>'
        "<h2>Nested tasks</h2>{}{}"
        '<h2>Timeline</h2>{}<div class="timeline" data-last-seq="{}">{}</div>'
        "<h2>Events</h2>{}",
        red(run.response_id or "-"),
        red(run.session_id or "-"),
        red(run.uhp_server),
        status_badge(status),
        run.event_count,
        short_time(run.updated_at_ms),
        _task_rows(snapshot, frame),
        _unknown_calls(snapshot, frame),
        Markup(legend()),  # what each colour and marker means; each lane names its end state
        run.event_count,
        Markup(render_svg(timeline)),  # the CLI's renderer: every text in it is escaped
        _events_table(timeline),
    )


def run_page(
    snapshot: RunSnapshot,
    timeline: Timeline,
    frame: Frame,
    *,
    flash: str | None = None,
) -> str:
    """The whole run page; its live area follows ``/runs/<ref>/stream`` (SSE)."""
    run = snapshot.run
    body = html(
        '<h1>Run {}</h1><div id="live" data-stream="/runs/{}/stream" data-after="{}">{}</div>'
        '<p class="muted" id="live-state">live: connecting…</p>',
        run.ref,
        run.ref,
        run.event_count,
        live_fragment(snapshot, timeline, frame),
    )
    return layout(f"Run {run.ref}", body, frame, flash=flash)
