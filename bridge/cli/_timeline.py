"""A run's timeline: the model (one outer lane, one lane per inner task) and its terminal form.

The two lifecycles stay side by side: the outer lane is built from ``run.*`` / ``outer.*``
events only, each inner lane from its own task's events only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from bridge import events as ev
from bridge._ledger.reads.views import RunView
from bridge.cli._records import (
    Redactor,
    RunSnapshot,
    describe,
    event_task_ref,
    iso,
    relative,
    run_record,
    short_time,
    task_verdicts,
)
from bridge.cli._style import STATE_COLOURS
from bridge.cli._tables import event_style


# -- timeline model -------------------------------------------------------------------------------
@dataclass(slots=True)
class Segment:
    state: str
    start_ms: int
    end_ms: int
    open_end: bool = False  # still in this state at the end of the timeline


@dataclass(slots=True)
class Marker:
    kind: str
    at_ms: int
    seq: int
    label: str


@dataclass(slots=True)
class Lane:
    key: str  # "outer" or a task_ref
    title: str
    subtitle: str
    segments: list[Segment] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)


@dataclass(slots=True)
class Timeline:
    run: RunView
    origin_ms: int
    end_ms: int
    lanes: list[Lane]
    events: list[ev.BridgeEvent]
    redactor: Redactor

    def lane_of(self, event: ev.BridgeEvent) -> str:
        ref = event_task_ref(event)
        if ref is not None and any(lane.key == ref for lane in self.lanes):
            return ref
        return "outer"

    def record(self) -> dict[str, Any]:
        def rel(ms: int) -> int:
            return ms - self.origin_ms

        data = {
            "run": run_record(self.run),
            "origin_ms": self.origin_ms,
            "origin": iso(self.origin_ms),
            "end_ms": self.end_ms,
            "lanes": [
                {
                    "lane": lane.key,
                    "title": lane.title,
                    "subtitle": lane.subtitle,
                    "segments": [
                        {
                            "state": s.state,
                            "start_rel_ms": rel(s.start_ms),
                            "end_rel_ms": rel(s.end_ms),
                            "open": s.open_end,
                        }
                        for s in lane.segments
                    ],
                    "markers": [
                        {"kind": m.kind, "rel_ms": rel(m.at_ms), "seq": m.seq, "label": m.label}
                        for m in lane.markers
                    ],
                }
                for lane in self.lanes
            ],
            "events": [
                {
                    "seq": e.seq,
                    "type": e.type,
                    "lane": self.lane_of(e),
                    "task_ref": event_task_ref(e),
                    "rel_ms": rel(e.at_ms),
                    "summary": describe(e),
                }
                for e in self.events
            ],
        }
        redacted: dict[str, Any] = self.redactor.value(data)
        return redacted


class _LaneBuilder:
    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.state: str | None = None
        self.since = 0

    def switch(self, state: str | None, at_ms: int) -> None:
        if self.state is not None and self.state != state:
            self.lane.segments.append(Segment(self.state, self.since, at_ms))
        if self.state != state:
            self.state = state
            self.since = at_ms

    def finish(self, end_ms: int) -> None:
        if self.state is not None:
            self.lane.segments.append(Segment(self.state, self.since, end_ms, open_end=True))
            self.state = None


def build_timeline(snapshot: RunSnapshot) -> Timeline:
    events = snapshot.events
    run = snapshot.run
    origin = events[0].at_ms if events else run.created_at_ms
    last = max((e.at_ms for e in events), default=origin)
    # Open segments end at the last recorded event: the ledger knows nothing later than that.
    end = max(last, origin + 1)

    outer = Lane(
        "outer",
        f"outer {run.response_id or run.ref}",
        f"{run.ref} on {run.uhp_server}",
    )
    builders = {"outer": _LaneBuilder(outer)}
    first_change = next((e for e in events if isinstance(e, ev.OuterStatusChanged)), None)
    initial: str | None
    if first_change is not None:
        initial = first_change.previous.value if first_change.previous else "pending"
    else:
        initial = run.status.value if run.status is not None else "pending"
    builders["outer"].switch(initial, origin)

    lanes = [outer]
    for task in snapshot.tasks:
        lane = Lane(
            task.ref,
            f"{task.ref} {task.server_label}.{task.tool_name}",
            " · ".join([f"op {task.op_ref}", task.status.value, *task_verdicts(task)]),
        )
        lanes.append(lane)
        builders[task.ref] = _LaneBuilder(lane)

    for event in events:
        ref = event_task_ref(event)
        builder = builders.get(ref) if ref is not None else None
        target = builder if builder is not None else builders["outer"]
        kind = _marker_kind(event)
        if kind is not None:
            target.lane.markers.append(
                Marker(kind, event.at_ms, event.seq, snapshot.redactor.text(describe(event)))
            )
        match event:
            case ev.OuterStatusChanged():
                state = event.status.value
                builders["outer"].switch(state, event.at_ms)
                if event.status.is_terminal:
                    builders["outer"].lane.segments.append(Segment(state, event.at_ms, event.at_ms))
                    builders["outer"].state = None
            case ev.TaskCreated() if builder is not None:
                builder.switch(event.status.value, event.at_ms)
            case ev.TaskStatusChanged() if builder is not None:
                if event.status.is_terminal:
                    builder.switch(None, event.at_ms)  # task.terminal marks the end state
                elif builder.state not in ("lost", "detached"):
                    builder.switch(event.status.value, event.at_ms)
            case ev.TaskTerminal() if builder is not None:
                builder.switch(None, event.at_ms)
                builder.lane.segments.append(Segment(event.status.value, event.at_ms, event.at_ms))
            case ev.TaskLost() if builder is not None:
                builder.switch("lost", event.at_ms)
            case ev.TaskDetached() if builder is not None:
                builder.switch("detached", event.at_ms)
            case _:
                pass
    for builder in builders.values():
        builder.finish(end)
    for lane in lanes:
        # Zero-length terminal segments only mark the end state: keep them out of "open".
        lane.segments = [s for s in lane.segments if s.end_ms > s.start_ms or not s.open_end]
    return Timeline(run, origin, end, lanes, list(events), snapshot.redactor)


def _marker_kind(event: ev.BridgeEvent) -> str | None:
    match event:
        case ev.TaskInputRequired():
            return "input_required"
        case ev.TaskInputAnswered():
            return "input_answered"
        case ev.TaskCancelRequested():
            return "cancel_requested"
        case ev.TaskLost():
            return "lost"
        case ev.Anomaly():
            return "anomaly"
        case ev.CallUnknownOutcome():
            return "unknown_outcome"
        case ev.ServerUnreachable():
            return "unreachable"
        case ev.StepRecoverableFailure():
            return "step_failure"
        case ev.OuterStreamLost():
            return "stream_lost"
        case ev.OuterResumed():
            return "resumed"
        case ev.OuterOpenTasks():
            return "open_tasks"
    return None


BAR_WIDTH = 60


def timeline_renderable(timeline: Timeline) -> RenderableType:
    """A lane table (one column per lifecycle, one row per event) and a bar per lane."""
    table = Table(
        title=f"Timeline of {timeline.run.ref} (t = 0 at {short_time(timeline.origin_ms)} UTC)",
        title_justify="left",
        header_style="bold",
        show_lines=False,
    )
    table.add_column("t", no_wrap=True, justify="right")
    table.add_column("#", justify="right")
    keys = [lane.key for lane in timeline.lanes]
    for lane in timeline.lanes:
        table.add_column(Text(lane.title, style="cyan" if lane.key == "outer" else ""))
    for event in timeline.events:
        cells: list[RenderableType] = ["" for _ in keys]
        text = Text(event.type, style=event_style(event))
        summary = timeline.redactor.text(describe(event))
        if summary:
            text.append("\n" + summary, style="dim")
        cells[keys.index(timeline.lane_of(event))] = text
        table.add_row(relative(event.at_ms - timeline.origin_ms), str(event.seq), *cells)

    bars = Table(box=None, show_header=False, pad_edge=False)
    bars.add_column("lane", no_wrap=True)
    bars.add_column("bar", no_wrap=True)
    span = max(timeline.end_ms - timeline.origin_ms, 1)
    for lane in timeline.lanes:
        bar = Text()
        cells_state: list[str | None] = [None] * BAR_WIDTH
        for seg in lane.segments:
            start = int((seg.start_ms - timeline.origin_ms) / span * BAR_WIDTH)
            stop = max(start + 1, int((seg.end_ms - timeline.origin_ms) / span * BAR_WIDTH))
            for i in range(max(start, 0), min(stop, BAR_WIDTH)):
                cells_state[i] = seg.state
        marks = {
            min(int((m.at_ms - timeline.origin_ms) / span * BAR_WIDTH), BAR_WIDTH - 1)
            for m in lane.markers
        }
        for i, state in enumerate(cells_state):
            char = "◆" if i in marks else ("█" if state else "·")
            colour = STATE_COLOURS.get(state or "", "")
            bar.append(char, style=(f"{colour}" if colour else "dim"))
        states = " → ".join(dict.fromkeys(s.state for s in lane.segments))
        bar.append(f"  {states}", style="dim")
        bars.add_row(Text(lane.title), bar)
    legend = Text()
    for name in ("in_progress", "working", "input_required", "completed", "failed", "lost"):
        legend.append("█ ", style=STATE_COLOURS[name])
        legend.append(name + "  ", style="dim")
    legend.append("◆ marker (input / cancel / lost / anomaly)", style="dim")
    return Group(table, Text(""), bars, legend)
