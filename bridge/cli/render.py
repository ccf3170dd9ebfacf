"""What the operator CLI shows: run snapshots, event summaries, timelines, and their rich forms.

Everything here works on the ledger's public views and typed events. Two rules hold throughout:

* raw MCP task ids (``TaskView.task_id``) and server input keys (``InputRequestView.key``) are
  never copied into anything this module returns; as a second line of defence every string that
  leaves the CLI goes through a :class:`Redactor` that replaces any raw task id of the run it
  describes by ``[tk_…]``;
* the two lifecycles stay side by side: the outer lane is built from ``run.*`` / ``outer.*``
  events only, each inner lane from its own task's events only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from bridge import events as ev
from bridge.ledger.store import TenantLedger
from bridge.ledger.views import DispatchView, InputRequestView, RunView, TaskView
from bridge.lifecycle import DispatchState

# -- colours (shared with the HTML timeline) ------------------------------------------------------
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


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def short_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration(ms: int) -> str:
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def relative(ms: int) -> str:
    return f"+{ms / 1000:.3f}s"


# -- redaction ------------------------------------------------------------------------------------
class Redactor:
    """Replaces raw task ids (``TaskView.task_id``) by ``[task_ref]`` in any text or JSON value."""

    def __init__(self, tasks: Iterable[TaskView] = ()) -> None:
        self._pairs: list[tuple[str, str]] = []
        for task in tasks:
            self.add(task)

    def add(self, task: TaskView) -> None:
        # Very short ids would make the replacement match ordinary words; ids are never that short.
        if len(task.task_id) >= 6:
            self._pairs.append((task.task_id, f"[{task.ref}]"))
            self._pairs.sort(key=lambda pair: -len(pair[0]))

    def text(self, value: str) -> str:
        for raw, ref in self._pairs:
            if raw in value:
                value = value.replace(raw, ref)
        return value

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


# -- records --------------------------------------------------------------------------------------
def run_record(run: RunView) -> dict[str, Any]:
    return {
        "run_ref": run.ref,
        "uhp_server": run.uhp_server,
        "response_id": run.response_id,
        "session_id": run.session_id,
        "harness_id": run.harness_id,
        "status": run.status.value if run.status is not None else None,
        "error": run.error,
        "event_count": run.event_count,
        "created_at": iso(run.created_at_ms),
        "updated_at": iso(run.updated_at_ms),
        "created_at_ms": run.created_at_ms,
        "updated_at_ms": run.updated_at_ms,
    }


def task_counts(tasks: Sequence[TaskView], dispatches: Sequence[DispatchView]) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    for task in tasks:
        by_status[task.status.value] = by_status.get(task.status.value, 0) + 1
    return {
        "total": len(tasks),
        "by_status": dict(sorted(by_status.items())),
        "lost": sum(1 for t in tasks if t.lost_reason is not None),
        "unknown": sum(1 for d in dispatches if d.state is DispatchState.UNKNOWN),
        "open": sum(1 for t in tasks if t.is_open),
    }


def task_end_ms(task: TaskView, now: int) -> int:
    """When the task stopped being watched (terminal, detached, lost), else now."""
    if task.terminal_at_ms is not None:
        return task.terminal_at_ms
    if task.detached_at_ms is not None:
        return task.detached_at_ms
    if task.lost_reason is not None:
        return task.updated_at_ms
    return now


def task_verdicts(task: TaskView) -> list[str]:
    verdicts: list[str] = []
    if task.lost_reason is not None:
        detail = f": {task.lost_detail}" if task.lost_detail else ""
        verdicts.append(f"lost({task.lost_reason.value}{detail})")
    if task.detached_at_ms is not None:
        verdicts.append("detached")
    if task.cancel_requested_at_ms is not None:
        verdicts.append("cancel requested")
    if task.outcome_truncated:
        verdicts.append("outcome truncated")
    return verdicts


def input_record(request: InputRequestView) -> dict[str, Any]:
    # Never the server's key (it may embed the raw task id), never the params or the answer.
    return {
        "input_ref": request.ref,
        "task_ref": request.task_ref,
        "method": request.method,
        "first_seen_at": iso(request.first_seen_ms),
        "answered_at": iso(request.answered_at_ms),
        "delivered_at": iso(request.delivered_at_ms),
    }


def task_record(task: TaskView, pending: Sequence[InputRequestView], now: int) -> dict[str, Any]:
    result_is_error = None
    if isinstance(task.result, dict):
        result_is_error = bool(task.result.get("isError", False))
    return {
        "task_ref": task.ref,
        "op_ref": task.op_ref,
        "server": task.server_label,
        "server_endpoint": task.server_endpoint,
        "server_version": task.server_version,
        "tool": task.tool_name,
        "status": task.status.value,
        "status_message": task.status_message,
        "open": task.is_open,
        "lost_reason": task.lost_reason.value if task.lost_reason is not None else None,
        "lost_detail": task.lost_detail,
        "detached": task.detached_at_ms is not None,
        "cancel_requested": task.cancel_requested_at_ms is not None,
        "verdicts": task_verdicts(task),
        "has_result": task.result is not None,
        "result_is_error": result_is_error,
        "has_error": task.error is not None,
        "outcome_bytes": task.outcome_bytes,
        "outcome_truncated": task.outcome_truncated,
        "created_at": iso(task.created_at_ms),
        "terminal_at": iso(task.terminal_at_ms),
        "duration_ms": task_end_ms(task, now) - task.created_at_ms,
        "pending_inputs": [input_record(r) for r in pending],
    }


def dispatch_record(dispatch: DispatchView) -> dict[str, Any]:
    return {
        "op_ref": dispatch.ref,
        "server": dispatch.server_name or dispatch.server_endpoint,
        "tool": dispatch.tool_name,
        "state": dispatch.state.value,
        "unknown_reason": dispatch.unknown_reason,
        "task_ref": dispatch.task_ref,
        "result_truncated": dispatch.result_truncated,
        "created_at": iso(dispatch.created_at_ms),
    }


# -- run snapshot ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RunSnapshot:
    run: RunView
    dispatches: list[DispatchView]
    tasks: list[TaskView]
    pending_inputs: dict[str, list[InputRequestView]]
    events: list[ev.BridgeEvent]
    now_ms: int
    redactor: Redactor = field(default_factory=Redactor)

    def record(self) -> dict[str, Any]:
        by_op: dict[str, list[TaskView]] = {}
        for task in self.tasks:
            by_op.setdefault(task.op_ref, []).append(task)
        calls = []
        for dispatch in self.dispatches:
            item = dispatch_record(dispatch)
            item["tasks"] = [
                task_record(t, self.pending_inputs.get(t.ref, []), self.now_ms)
                for t in by_op.pop(dispatch.ref, [])
            ]
            calls.append(item)
        orphans = [
            task_record(t, self.pending_inputs.get(t.ref, []), self.now_ms)
            for tasks in by_op.values()
            for t in tasks
        ]
        anomalies = [e for e in self.events if isinstance(e, ev.Anomaly)]
        data = {
            "run": run_record(self.run),
            "counts": task_counts(self.tasks, self.dispatches),
            "calls": calls,
            "tasks_without_call": orphans,
            "anomalies": [event_record(e) for e in anomalies],
        }
        redacted: dict[str, Any] = self.redactor.value(data)
        return redacted


def load_snapshot(tenant: TenantLedger, run_ref: str, *, now: int | None = None) -> RunSnapshot:
    run = tenant.get_run(run_ref)  # NotFound for a foreign or missing run
    tasks = tenant.list_tasks(run_ref=run_ref)
    pending = {t.ref: tenant.input_requests(t.ref, pending_only=True) for t in tasks}
    return RunSnapshot(
        run=run,
        dispatches=tenant.list_dispatches(run_ref=run_ref),
        tasks=tasks,
        pending_inputs={k: v for k, v in pending.items() if v},
        events=tenant.events(run_ref),
        now_ms=now if now is not None else now_ms(),
        redactor=Redactor(tasks),
    )


# -- events ---------------------------------------------------------------------------------------
def describe(event: ev.BridgeEvent) -> str:
    """A one-line summary of an event (references and statuses, no payloads)."""
    match event:
        case ev.RunRegistered():
            return f"on {event.uhp_server} response={event.response_id or '-'}"
        case ev.OuterIdsRecorded():
            return f"response={event.response_id} session={event.session_id or '-'}"
        case ev.OuterStatusChanged():
            previous = event.previous.value if event.previous else "-"
            return f"{previous} -> {event.status.value}"
        case ev.OuterTerminal():
            error = f" error={_short(event.error)}" if event.error else ""
            return f"{event.status.value}{error}"
        case ev.OuterStreamLost():
            return f"{event.reason} (last sequence {event.last_sequence})"
        case ev.OuterResumed():
            return f"by {event.mode} after {event.after_sequence}"
        case ev.CallUnknownOutcome():
            return (
                f"{event.op_ref} {event.server}.{event.tool} was {event.previous.value}: "
                f"{event.reason}"
            )
        case ev.CallResult():
            flag = " rpc-error" if event.rpc_error else (" is-error" if event.is_error else "")
            return f"{event.op_ref} {event.server}.{event.tool} immediate result{flag}"
        case ev.TaskCreated():
            return f"{event.server}.{event.tool} {event.status.value} ({event.op_ref})"
        case ev.TaskStatusChanged():
            message = f" '{event.status_message}'" if event.status_message else ""
            return f"{event.previous.value} -> {event.status.value}{message}"
        case ev.TaskInputRequired():
            return f"{event.input_ref} {event.method}"
        case ev.TaskInputAnswered():
            return f"{event.input_ref} answered"
        case ev.TaskCancelRequested():
            return f"by {event.requested_by} (intent)"
        case ev.TaskDetached():
            return f"by {event.requested_by}"
        case ev.StepRecoverableFailure():
            return event.reason
        case ev.OuterOpenTasks():
            return f"{len(event.task_refs)} open at {event.status.value}: {event.action}"
        case ev.ServerUnreachable():
            return f"{event.server}: {event.detail}"
        case ev.TaskLost():
            return f"{event.reason.value}" + (f": {event.detail}" if event.detail else "")
        case ev.TaskTerminal():
            extra = " (supersedes lost)" if event.superseded_lost else ""
            kind = "error" if event.error is not None else "result"
            trunc = ", truncated" if event.truncated else ""
            return f"{event.status.value} with {kind}{trunc}{extra}"
        case ev.Anomaly():
            return f"{event.kind}: {event.detail}"
    return ""


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def event_task_ref(event: ev.BridgeEvent) -> str | None:
    ref = getattr(event, "task_ref", None)
    return ref if isinstance(ref, str) else None


def event_record(event: ev.BridgeEvent, origin_ms: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "seq": event.seq,
        "type": event.type,
        "task_ref": event_task_ref(event),
        "at": iso(event.at_ms),
        "at_ms": event.at_ms,
    }
    if origin_ms is not None:
        data["rel_ms"] = event.at_ms - origin_ms
    data["summary"] = describe(event)
    data["event"] = event.model_dump(mode="json")
    return data


def events_table(
    events: Sequence[ev.BridgeEvent], redactor: Redactor, origin_ms: int | None
) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    # Fixed widths: ``events --follow`` prints one single-row table per event.
    table.add_column("seq", justify="right", min_width=4)
    table.add_column("time" if origin_ms is None else "t", no_wrap=True, min_width=19)
    table.add_column("type", no_wrap=True, min_width=24)
    table.add_column("task", no_wrap=True, min_width=25)
    table.add_column("details")
    for event in events:
        add_event_row(table, event, redactor, origin_ms)
    return table


def add_event_row(
    table: Table, event: ev.BridgeEvent, redactor: Redactor, origin_ms: int | None
) -> None:
    when = short_time(event.at_ms) if origin_ms is None else relative(event.at_ms - origin_ms)
    table.add_row(
        str(event.seq),
        when,
        Text(event.type, style=_event_style(event)),
        event_task_ref(event) or "",
        Text(redactor.text(describe(event))),
    )


def _event_style(event: ev.BridgeEvent) -> str:
    if isinstance(event, ev.Anomaly | ev.TaskLost | ev.CallUnknownOutcome):
        return "bold red"
    if isinstance(event, ev.TaskInputRequired):
        return "dark_orange"
    if event.type.startswith(("outer.", "run.")):
        return "cyan"
    if isinstance(event, ev.TaskTerminal):
        return RICH_STYLES.get(event.status.value, "")
    return ""


# -- runs list ------------------------------------------------------------------------------------
def runs_table(rows: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="Outer runs", header_style="bold", title_justify="left")
    for name in ("run", "UHP server", "response", "session", "status", "updated", "tasks"):
        table.add_column(name, no_wrap=name != "tasks")
    for row in rows:
        run = row["run"]
        counts = row["counts"]
        parts = [f"{n} {status}" for status, n in counts["by_status"].items()]
        if counts["lost"]:
            parts.append(f"[bold]{counts['lost']} lost[/bold]")
        if counts["unknown"]:
            parts.append(f"[bold yellow]{counts['unknown']} unknown[/bold yellow]")
        status = run["status"] or "pending"
        table.add_row(
            run["run_ref"],
            Text(run["uhp_server"]),
            Text(run["response_id"] or "-"),
            Text(run["session_id"] or "-"),
            Text(status, style=RICH_STYLES.get(status, "")),
            short_time(run["updated_at_ms"]),
            ", ".join(parts) if parts else "-",
        )
    return table


# -- show tree ------------------------------------------------------------------------------------
def run_tree(snapshot: RunSnapshot) -> Tree:
    record = snapshot.record()
    run = record["run"]
    status = run["status"] or "pending (not acknowledged)"
    head = Text()
    head.append(run["run_ref"], style="bold")
    head.append("  outer response ")
    head.append(run["response_id"] or "-", style="cyan")
    head.append(f"  session {run['session_id'] or '-'}  on {run['uhp_server']}  ")
    head.append(status, style=RICH_STYLES.get(run["status"] or "pending", ""))
    head.append(f"  updated {short_time(run['updated_at_ms'])}", style="dim")
    tree = Tree(head)
    if not record["calls"] and not record["tasks_without_call"]:
        tree.add(Text("no tool calls", style="dim"))
    for call in record["calls"]:
        label = Text()
        label.append(call["op_ref"], style="bold")
        label.append(f"  {call['server']}.{call['tool']}  ")
        label.append(call["state"], style=RICH_STYLES.get(call["state"], ""))
        if call["state"] == DispatchState.UNKNOWN.value:
            label.append("  unknown outcome", style="bold yellow")
            if call["unknown_reason"]:
                label.append(f" ({call['unknown_reason']})", style="yellow")
        node = tree.add(label)
        for task in call["tasks"]:
            _add_task(node, task)
    for task in record["tasks_without_call"]:
        _add_task(tree, task)
    if record["anomalies"]:
        branch = tree.add(Text(f"anomalies ({len(record['anomalies'])})", style="bold red"))
        for anomaly in record["anomalies"]:
            where = f" [{anomaly['task_ref']}]" if anomaly["task_ref"] else ""
            branch.add(Text(f"#{anomaly['seq']}{where} {anomaly['summary']}", style="red"))
    return tree


def _add_task(parent: Tree, task: dict[str, Any]) -> None:
    label = Text()
    label.append(task["task_ref"], style="bold")
    label.append("  ")
    label.append(task["status"], style=RICH_STYLES.get(task["status"], ""))
    running = "" if task["terminal_at"] or not task["open"] else " so far"
    label.append(f"  {duration(task['duration_ms'])}{running}", style="dim")
    for verdict in task["verdicts"]:
        label.append("  ")
        style = "bold white on grey23" if verdict.startswith("lost") else "bold yellow"
        label.append(verdict, style=style)
    if task["has_result"]:
        label.append("  result" + (" (isError)" if task["result_is_error"] else ""), style="dim")
    if task["has_error"]:
        label.append("  error", style="red")
    if task["status_message"]:
        label.append(f"  '{task['status_message']}'", style="italic")
    node = parent.add(label)
    for request in task["pending_inputs"]:
        node.add(
            Text.assemble(
                ("input ", "dark_orange"),
                (request["input_ref"], "bold"),
                f"  {request['method']}  pending since {short_time_iso(request['first_seen_at'])}",
            )
        )


def short_time_iso(value: str | None) -> str:
    return value.replace("T", " ")[:19] if value else "-"


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
        text = Text(event.type, style=_event_style(event))
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
