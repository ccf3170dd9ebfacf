"""Plain records of what the operator CLI shows: run snapshots, event summaries, times.

Everything here works on the ledger's public views and typed events. Raw MCP task ids
(``TaskView.task_id``) and server input keys (``InputRequestView.key``) are never copied into
anything this module returns; as a second line of defence every string that leaves the CLI goes
through a :class:`Redactor` that replaces any raw task id of the run it describes by ``[tk_…]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bridge import events as ev
from bridge._ledger._base import wall_clock_ms
from bridge._ledger.reader import LedgerReader
from bridge._ledger.reads.attention import question_of
from bridge._ledger.reads.call_states import CallStanding, calls_of
from bridge._ledger.reads.views import CallView, InputRequestView, RunView, TaskView
from bridge._lifecycle import Admission, CallState
from bridge.cli._status_lines import (
    run_status_brief,
    run_status_line,
    task_status_line,
)


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


def short_time_iso(value: str | None) -> str:
    return value.replace("T", " ")[:19] if value else "-"


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
def run_record(run: RunView, calls: Sequence[CallStanding] | None = None) -> dict[str, Any]:
    """The run's recorded fields; with its ``calls``, also its status line, derived now."""
    record = {
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
    if calls is not None:
        record["status_line"] = run_status_line(run, calls)
        record["status_brief"] = run_status_brief(run, calls)
    return record


def task_counts(
    tasks: Sequence[TaskView],
    dispatches: Sequence[CallView],
    verdicts: Mapping[str, Admission] | None = None,
) -> dict[str, Any]:
    """Tasks by status, lost ones, and calls of unknown outcome: ``unknown`` those still
    without a final verdict, ``resolved`` those given one."""
    by_status: dict[str, int] = {}
    for task in tasks:
        if task.lost_reason is not None and task.terminal_at_ms is None:
            continue  # counted as lost: its last status seen is no longer true
        by_status[task.status.value] = by_status.get(task.status.value, 0) + 1
    unknown = [d.ref for d in dispatches if d.state is CallState.UNKNOWN]
    resolved = sum(1 for ref in unknown if (verdicts or {}).get(ref, Admission.UNKNOWN).is_final)
    return {
        "total": len(tasks),
        "by_status": dict(sorted(by_status.items())),
        "lost": sum(1 for t in tasks if t.lost_reason is not None),
        "unknown": len(unknown) - resolved,
        "resolved": resolved,
        "open": sum(1 for t in tasks if t.is_open),
    }


def run_verdicts(reader: LedgerReader, dispatches: Sequence[CallView]) -> dict[str, Admission]:
    """The latest admission verdict on each call of unknown outcome (few: read one by one)."""
    unknown = [dispatch.ref for dispatch in dispatches if dispatch.state is CallState.UNKNOWN]
    verdicts = {ref: reader.admission(ref) for ref in unknown}
    return {ref: verdict for ref, verdict in verdicts.items() if verdict is not None}


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


def task_record(
    task: TaskView,
    pending: Sequence[InputRequestView],
    now: int,
    inputs: Sequence[InputRequestView] | None = None,
) -> dict[str, Any]:
    """The task's fields and its status line, derived at ``now`` from them and its input
    requests (``inputs``: all of them, answered too; else the ``pending`` ones)."""
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
        "status_line": task_status_line(task, pending if inputs is None else inputs, now),
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


def dispatch_record(dispatch: CallView) -> dict[str, Any]:
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
    dispatches: list[CallView]
    tasks: list[TaskView]
    pending_inputs: dict[str, list[InputRequestView]]
    events: list[ev.BridgeEvent]
    now_ms: int
    redactor: Redactor = field(default_factory=Redactor)
    inputs: dict[str, list[InputRequestView]] = field(default_factory=dict)  # of open tasks

    @property
    def verdicts(self) -> dict[str, Admission]:
        """The latest admission verdict on each call (events are in order)."""
        return {
            e.op_ref: e.admission for e in self.events if isinstance(e, ev.CallAdmissionChecked)
        }

    @property
    def calls(self) -> list[CallStanding]:
        """The run's calls and where each stands now (a verdict said beside it)."""
        return calls_of(self.dispatches, self.tasks, self.verdicts)

    def record(self) -> dict[str, Any]:
        by_op: dict[str, list[TaskView]] = {}
        for task in self.tasks:
            by_op.setdefault(task.op_ref, []).append(task)
        calls = []
        verdicts = {
            e.op_ref: e for e in self.events if isinstance(e, ev.CallAdmissionChecked)
        }  # the latest verdict on each call (events are in order)
        for dispatch in self.dispatches:
            item = dispatch_record(dispatch)
            verdict = verdicts.get(dispatch.ref)
            item["verdict"] = None if verdict is None else verdict_record(verdict)
            item["tasks"] = [self._task(t) for t in by_op.pop(dispatch.ref, [])]
            calls.append(item)
        orphans = [self._task(t) for tasks in by_op.values() for t in tasks]
        anomalies = [e for e in self.events if isinstance(e, ev.Anomaly)]
        data = {
            "run": run_record(self.run, self.calls),
            "counts": task_counts(self.tasks, self.dispatches, self.verdicts),
            "calls": calls,
            "tasks_without_call": orphans,
            "anomalies": [event_record(e) for e in anomalies],
        }
        redacted: dict[str, Any] = self.redactor.value(data)
        return redacted

    def _task(self, task: TaskView) -> dict[str, Any]:
        pending = self.pending_inputs.get(task.ref, [])
        record = task_record(task, pending, self.now_ms, self.inputs.get(task.ref, pending))
        for shown, request in zip(record["pending_inputs"], pending, strict=True):
            question, fields, schema = question_of(request.params)  # redacted with the record
            shown.update(question=question, fields=list(fields), field_hints=field_hints(schema))
        acknowledged = [
            e
            for e in self.events
            if isinstance(e, ev.OperatorAcknowledged) and e.task_ref == task.ref
        ]
        record["acknowledged_by"] = acknowledged[-1].by if acknowledged else None
        return record


def field_hints(schema: Any) -> list[str]:
    """Each field a form asks for, with its type and whether it is required
    (``approve (boolean, required)``): what to give ``bridge answer --accept NAME=…``."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return []
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    hints = []
    for name, spec in schema["properties"].items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        choices = spec.get("enum") if isinstance(spec, dict) else None
        said = ["|".join(map(str, choices)) if isinstance(choices, list) else str(kind or "any")]
        if name in needed:
            said.append("required")
        hints.append(f"{name} ({', '.join(said)})")
    return hints


def verdict_record(event: ev.CallAdmissionChecked) -> dict[str, Any]:
    """A verdict on a call of unknown outcome, and who gave it."""
    return {
        "admission": event.admission.value,
        "decided_by": event.decided_by,
        "by": event.by or event.decided_by,
        "at": iso(event.at_ms),
    }


def load_snapshot(reader: LedgerReader, run_ref: str, *, now: int | None = None) -> RunSnapshot:
    run = reader.run(run_ref)  # NotFound for a foreign or missing run
    tasks = reader.tasks(run_ref)
    # A request the bridge declined, or closed with its lost task, waits for nobody.
    asked = {t.ref: reader.inputs(t.ref, pending_only=True) for t in tasks}
    pending = {ref: [r for r in rs if not r.declined_at_ms] for ref, rs in asked.items()}
    inputs = {t.ref: reader.inputs(t.ref) for t in tasks if t.is_open}
    return RunSnapshot(
        run=run,
        dispatches=reader.calls(run_ref),
        tasks=tasks,
        pending_inputs={k: v for k, v in pending.items() if v},
        events=reader.events(run_ref),
        now_ms=now if now is not None else wall_clock_ms(),
        redactor=Redactor(tasks),
        inputs={k: v for k, v in inputs.items() if v},
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
        case ev.OuterFieldsIgnored():
            return "server ignored " + ", ".join(event.fields)
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
        case ev.CallAdmissionChecked():
            return f"{event.op_ref} {event.admission.value} (by {event.by or event.decided_by})"
        case ev.OperatorAcknowledged():
            what = event.task_ref or f"anomaly #{event.anomaly_seq}"
            return f"{what} acknowledged by {event.by}" + (f": {event.note}" if event.note else "")
        case ev.OuterClosedByOperator():
            return f"closed as {event.status.value} by {event.by}: {event.reason}"
        case ev.TaskInputDeclined():
            return f"{event.input_ref} closed ({event.reason})"
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
