"""The CLI's colours and marker labels, shared by the terminal views and the HTML timeline."""

from __future__ import annotations

STATE_COLOURS: dict[str, str] = {
    "pending": "#9e9e9e",
    "in_progress": "#1e88e5",
    "working": "#1e88e5",
    "input_required": "#fb8c00",
    "completed": "#43a047",
    "failed": "#e53935",
    "incomplete": "#8e24aa",
    "cancelled": "#757575",
    "lost": "#424242",
    "detached": "#bdbdbd",
}
RICH_STYLES: dict[str, str] = {
    "pending": "grey62",
    "in_progress": "bright_blue",
    "working": "bright_blue",
    "input_required": "dark_orange",
    "completed": "green",
    "failed": "red",
    "incomplete": "magenta",
    "cancelled": "grey50",
    "lost": "bold white on grey23",
    "detached": "grey70",
    "unknown": "bold yellow",
    "task": "green",
    "result": "green",
    "sent": "bright_blue",
}
MARKER_COLOURS: dict[str, str] = {
    "input_required": "#fb8c00",
    "input_answered": "#fdd835",
    "cancel_requested": "#6d4c41",
    "lost": "#c62828",
    "anomaly": "#d81b60",
    "unknown_outcome": "#fdd835",
    "unreachable": "#00897b",
    "step_failure": "#5e35b1",
    "stream_lost": "#d81b60",
    "resumed": "#00897b",
    "open_tasks": "#6d4c41",
}
MARKER_LABELS: dict[str, str] = {
    "input_required": "input required",
    "input_answered": "input answered",
    "cancel_requested": "cancel requested",
    "lost": "lost",
    "anomaly": "anomaly",
    "unknown_outcome": "unknown outcome",
    "unreachable": "server unreachable",
    "step_failure": "step gave up waiting",
    "stream_lost": "outer stream lost",
    "resumed": "outer stream resumed",
    "open_tasks": "tasks open at outer end",
}
