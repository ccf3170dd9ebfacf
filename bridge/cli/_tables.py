"""Rich tables and trees of the operator CLI: run lists, event tables, a run's call tree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from bridge import events as ev
from bridge._lifecycle import CallState
from bridge.cli._records import (
    Redactor,
    RunSnapshot,
    describe,
    duration,
    event_task_ref,
    relative,
    short_time,
    short_time_iso,
)
from bridge.cli._style import RICH_STYLES


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
        Text(event.type, style=event_style(event)),
        event_task_ref(event) or "",
        Text(redactor.text(describe(event))),
    )


def event_style(event: ev.BridgeEvent) -> str:
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
    """Readable at 80 columns and when piped: each run's ids stacked in one cell, and every
    cell folded, never cut (a reference cut to ``res…`` cannot be typed back)."""
    table = Table(
        title="Outer runs", header_style="bold", title_justify="left", box=None, pad_edge=False
    )
    table.add_column("run · response · session", overflow="fold", min_width=26)
    table.add_column("status", overflow="fold")
    table.add_column("updated", overflow="fold", min_width=10)
    table.add_column("tasks", overflow="fold", min_width=16)
    for row in rows:
        run = row["run"]
        counts = row["counts"]
        parts = [f"{n} {status}" for status, n in counts["by_status"].items()]
        if counts["lost"]:
            parts.append(f"[bold]{counts['lost']} lost[/bold]")
        if counts["unknown"]:
            parts.append(f"[bold yellow]{counts['unknown']} unknown[/bold yellow]")
        if counts.get("resolved"):
            parts.append(f"{counts['resolved']} resolved")
        status = run["status"] or "pending"
        ids = Text(run["run_ref"], style="bold")
        ids.append(f"\n{run['response_id'] or '-'}\n{run['session_id'] or '-'}")
        ids.append(f"\non {run['uhp_server']}", style="dim")
        table.add_row(
            ids,
            Text(run.get("status_brief", status), style=RICH_STYLES.get(status, "")),
            short_time(run["updated_at_ms"]).replace(" ", "\n"),
            "\n".join(parts) if parts else "-",
        )
        table.add_section()
    return table


# -- show tree ------------------------------------------------------------------------------------
_VERDICT_WORDS = {"admitted": "ran", "not_admitted": "never ran", "unknown": "still unknown"}


def run_tree(snapshot: RunSnapshot) -> Tree:
    record = snapshot.record()
    run = record["run"]
    head = Text()
    head.append(run["run_ref"], style="bold")
    head.append("  outer response ")
    head.append(run["response_id"] or "-", style="cyan")
    head.append(f"  session {run['session_id'] or '-'}  on {run['uhp_server']}  ")
    head.append(run["status_line"], style=RICH_STYLES.get(run["status"] or "pending", ""))
    head.append(f"  updated {short_time(run['updated_at_ms'])}", style="dim")
    tree = Tree(head)
    if not record["calls"] and not record["tasks_without_call"]:
        tree.add(Text("no tool calls", style="dim"))
    for call in record["calls"]:
        label = Text()
        label.append(call["op_ref"], style="bold")
        label.append(f"  {call['server']}.{call['tool']}  ")
        label.append(call["state"], style=RICH_STYLES.get(call["state"], ""))
        if call["state"] == CallState.UNKNOWN.value:
            label.append("  unknown outcome", style="bold yellow")
            if call["unknown_reason"]:
                label.append(f" ({call['unknown_reason']})", style="yellow")
        verdict = call.get("verdict")
        if verdict is not None:
            said = _VERDICT_WORDS.get(verdict["admission"], verdict["admission"])
            label.append(f"  verdict: {said} (by {verdict['by']})", style="bold")
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
    label.append(task["status_line"], style=RICH_STYLES.get(task["status"], ""))
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
    if task.get("acknowledged_by"):
        label.append(f"  acknowledged by {task['acknowledged_by']}", style="dim")
    node = parent.add(label)
    for request in task["pending_inputs"]:
        asked = node.add(
            Text.assemble(
                ("input ", "dark_orange"),
                (request["input_ref"], "bold"),
                f"  {request['method']}  pending since {short_time_iso(request['first_seen_at'])}",
            )
        )
        if request.get("question"):
            asked.add(Text(f"asks: {request['question']}"))
        if request.get("fields"):
            hints = request.get("field_hints") or request["fields"]
            asked.add(Text("fields: " + ", ".join(hints)))
