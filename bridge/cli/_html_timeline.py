"""A self-contained HTML page with an inline SVG timeline of one run (no scripts, no assets).

One lane for the outer response, one lane per inner task; status segments are coloured bars,
events that matter to an operator (input required, cancel, lost, anomaly, unknown outcome…) are
markers with a ``<title>`` tooltip. Every text goes through the run's redactor and is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from bridge.cli._records import duration, iso, relative
from bridge.cli._style import MARKER_COLOURS, MARKER_LABELS, STATE_COLOURS
from bridge.cli._timeline import Segment, Timeline

LABEL_W = 370
CHART_W = 900
LANE_H = 44
BAR_H = 20
TOP = 70
PAD = 20


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _x(timeline: Timeline, at_ms: int) -> float:
    span = max(timeline.end_ms - timeline.origin_ms, 1)
    return LABEL_W + (at_ms - timeline.origin_ms) / span * CHART_W


def _marker_shape(kind: str, x: float, y: float) -> str:
    colour = MARKER_COLOURS.get(kind, "#000")
    if kind == "lost":
        return (
            f'<path d="M{x - 6:.1f},{y - 6:.1f} L{x + 6:.1f},{y + 6:.1f} '
            f'M{x + 6:.1f},{y - 6:.1f} L{x - 6:.1f},{y + 6:.1f}" '
            f'stroke="{colour}" stroke-width="3"/>'
        )
    if kind in ("anomaly", "stream_lost"):
        return (
            f'<polygon points="{x:.1f},{y - 8:.1f} {x + 7:.1f},{y + 6:.1f} '
            f'{x - 7:.1f},{y + 6:.1f}" '
            f'fill="{colour}" stroke="#fff" stroke-width="1"/>'
        )
    if kind == "cancel_requested":
        return (
            f'<rect x="{x - 6:.1f}" y="{y - 6:.1f}" width="12" height="12" fill="{colour}" '
            f'stroke="#fff" stroke-width="1"/>'
        )
    return (
        f'<polygon points="{x:.1f},{y - 8:.1f} {x + 7:.1f},{y:.1f} {x:.1f},{y + 8:.1f} '
        f'{x - 7:.1f},{y:.1f}" fill="{colour}" stroke="#333" stroke-width="1"/>'
    )


def render_svg(timeline: Timeline) -> str:
    red = timeline.redactor.text
    lanes = timeline.lanes
    height = TOP + len(lanes) * LANE_H + 40
    width = LABEL_W + CHART_W + PAD * 2
    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" '
        f'role="img" aria-label="timeline of {escape(timeline.run.ref)}">',
        f"<title>{escape(red(f'Timeline of {timeline.run.ref}'))}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    # time axis
    span = timeline.end_ms - timeline.origin_ms
    axis_y = TOP - 20
    parts.append(
        f'<line x1="{LABEL_W}" y1="{axis_y}" x2="{LABEL_W + CHART_W}" y2="{axis_y}" stroke="#888"/>'
    )
    for i in range(11):
        at = timeline.origin_ms + span * i // 10
        x = _x(timeline, at)
        parts.append(
            f'<line x1="{x:.1f}" y1="{axis_y - 4}" x2="{x:.1f}" '
            f'y2="{TOP + len(lanes) * LANE_H}" stroke="#eee"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{axis_y - 8}" text-anchor="middle" fill="#555">'
            f"{escape(relative(at - timeline.origin_ms))}</text>"
        )
    for index, lane in enumerate(lanes):
        y = TOP + index * LANE_H
        bar_y = y + (LANE_H - BAR_H) / 2
        fill = "#f4f8fc" if lane.key == "outer" else ("#fafafa" if index % 2 else "#ffffff")
        parts.append(
            f'<rect x="0" y="{y}" width="{width}" height="{LANE_H}" fill="{fill}"/>'
            f'<g class="lane" data-lane="{escape(lane.key)}">'
            f"<title>{escape(red(f'{lane.title} — {lane.subtitle}'))}</title>"
            f'<text x="{PAD}" y="{y + 18}" font-weight="bold">{escape(_clip(red(lane.title), 52))}'
            "</text>"
            f'<text x="{PAD}" y="{y + 34}" fill="#666">{escape(_clip(red(lane.subtitle), 58))}'
            "</text>"
            "</g>"
        )
        end = lane_end_state(lane.segments)
        if end is not None:  # the state the lane ended in (or is still in), in words
            ink = STATE_COLOURS.get(end.split()[-1], "#333")
            parts.append(
                f'<text class="end-state" data-end="{escape(end)}" x="{LABEL_W - 8}" '
                f'y="{y + 18}" text-anchor="end" fill="{ink}" font-weight="bold">'
                f"{escape(end)}</text>"
            )
        for seg in lane.segments:
            x1 = _x(timeline, seg.start_ms)
            x2 = max(_x(timeline, seg.end_ms), x1 + 3)
            colour = STATE_COLOURS.get(seg.state, "#999")
            pattern = ' stroke-dasharray="4 2" stroke="#000"' if seg.state == "lost" else ""
            tip = (
                f"{lane.title}: {seg.state} from {relative(seg.start_ms - timeline.origin_ms)} "
                f"for {duration(seg.end_ms - seg.start_ms)}"
                + (" (still in this state at the last event)" if seg.open_end else "")
            )
            parts.append(
                f'<rect class="segment" data-state="{escape(seg.state)}" x="{x1:.1f}" '
                f'y="{bar_y:.1f}" width="{x2 - x1:.1f}" height="{BAR_H}" rx="3" '
                f'fill="{colour}"{pattern}><title>{escape(red(tip))}</title></rect>'
            )
            if seg.open_end:
                parts.append(
                    f'<polygon points="{x2:.1f},{bar_y:.1f} {x2 + 8:.1f},{bar_y + BAR_H / 2:.1f} '
                    f'{x2:.1f},{bar_y + BAR_H:.1f}" fill="{colour}" opacity="0.6"/>'
                )
        for marker in lane.markers:
            x = _x(timeline, marker.at_ms)
            tip = (
                f"#{marker.seq} {MARKER_LABELS.get(marker.kind, marker.kind)} at "
                f"{relative(marker.at_ms - timeline.origin_ms)}: {marker.label}"
            )
            parts.append(
                f'<g class="marker" data-kind="{escape(marker.kind)}">'
                f"<title>{escape(red(tip))}</title>"
                f"{_marker_shape(marker.kind, x, bar_y + BAR_H / 2)}</g>"
            )
    parts.append("</svg>")
    return "".join(parts)


def lane_end_state(segments: Sequence[Segment]) -> str | None:
    """How a lane ended: its final state, or ``still <state>`` while it is open."""
    if not segments:
        return None
    last = segments[-1]
    return f"still {last.state}" if last.open_end else last.state


def legend() -> str:
    """What the timeline's colours and markers mean (the page shows it above the chart)."""
    return _legend()


def _legend() -> str:
    items = []
    for state in (
        "pending",
        "in_progress",
        "working",
        "input_required",
        "completed",
        "failed",
        "incomplete",
        "cancelled",
        "lost",
        "detached",
    ):
        items.append(
            f'<span class="item"><svg width="22" height="12"><rect width="22" height="12" rx="2" '
            f'fill="{STATE_COLOURS[state]}"/></svg> {escape(state)}</span>'
        )
    for kind in (
        "input_required",
        "input_answered",
        "cancel_requested",
        "lost",
        "anomaly",
        "unknown_outcome",
        "unreachable",
        "step_failure",
    ):
        items.append(
            f'<span class="item"><svg width="18" height="18">{_marker_shape(kind, 9, 9)}</svg> '
            f"{escape(MARKER_LABELS[kind])}</span>"
        )
    return '<div class="legend">' + "".join(items) + "</div>"


def render_html(timeline: Timeline) -> str:
    red = timeline.redactor.text
    run = timeline.run
    rows = []
    for event in timeline.record()["events"]:
        rows.append(
            "<tr>"
            f"<td>{event['seq']}</td><td>{escape(relative(event['rel_ms']))}</td>"
            f"<td>{escape(event['lane'])}</td><td>{escape(event['type'])}</td>"
            f"<td>{escape(event['summary'])}</td></tr>"
        )
    title = f"Bridge timeline — {run.ref}"
    status = run.status.value if run.status is not None else "pending"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{escape(red(title))}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; background: #fff; }}
h1 {{ font-size: 20px; margin: 0 0 4px 0; }}
.meta {{ color: #555; margin-bottom: 12px; }}
.legend {{ display: flex; flex-wrap: wrap; gap: 14px; margin: 12px 0; font-size: 13px; }}
.legend .item {{ display: inline-flex; align-items: center; gap: 4px; }}
table {{ border-collapse: collapse; font-size: 12px; margin-top: 16px; }}
td, th {{ border-bottom: 1px solid #eee; padding: 3px 8px; text-align: left; }}
</style>
</head>
<body>
<h1>{escape(red(title))}</h1>
<div class="meta">outer response {escape(red(run.response_id or "-"))} · session
{escape(red(run.session_id or "-"))} · UHP server {escape(red(run.uhp_server))} ·
status <b>{escape(status)}</b> · t = 0 at {escape(iso(timeline.origin_ms) or "-")} ·
bars end at the last recorded event ({escape(iso(timeline.end_ms) or "-")})</div>
{_legend()}
{render_svg(timeline)}
<table>
<tr><th>seq</th><th>t</th><th>lane</th><th>type</th><th>details</th></tr>
{"".join(rows)}
</table>
</body>
</html>
"""
