"""Bridge events as UHP stream events, for a harness that serves UHP itself.

UHP lets a server add event types (an additive change) and obliges clients to ignore types
they do not know, so nested MCP task activity travels in the harness's own stream under a
vendor prefix (``bridge.mcp_task.*``). Every such event carries the bridge-local task
reference (never the raw ``taskId``), the tool and server name, the status and the event's
own sequence in the bridge ledger (``bridge_seq``), so a client can correlate it with
``GET``-able state or resume the bridge's event log.

The outer run's own lifecycle events (``run.*``, ``outer.*``) are not re-emitted: the harness
reports those through the standard ``response.*`` events.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bridge import events as ev
from bridge._ledger.reader import LedgerReader
from bridge._ledger.reads.views import TaskView
from bridge.uhp._models import PREFERRED_VERSION
from bridge.uhp._waiting import input_wait_mapping

SUMMARY_KEY = "bridge_mcp_tasks"
SUMMARY_TASK_LIMIT = 50


def _task_fields(event: ev.TaskEventLike) -> dict[str, Any]:
    return {"task_ref": event.task_ref, "tool": event.tool, "server": event.server}


def to_uhp_event(event: ev.BridgeEvent, version: str = PREFERRED_VERSION) -> dict[str, Any] | None:
    """The UHP stream event for a bridge event (without ``sequence_number``), or None.
    ``version``: the UHP version served; an inner ``input_required`` and its answer take the
    names and the outer status its input-wait mapping gives (``bridge.uhp._waiting``)."""
    waits = input_wait_mapping(version)
    body: dict[str, Any]
    match event:
        case ev.TaskCreated():
            body = {
                "type": "bridge.mcp_task.created",
                **_task_fields(event),
                "status": event.status.value,
                "op_ref": event.op_ref,
                "ttl_ms": event.ttl_ms,
                "poll_interval_ms": event.poll_interval_ms,
            }
        case ev.TaskStatusChanged():
            body = {
                "type": "bridge.mcp_task.status_changed",
                **_task_fields(event),
                "status": event.status.value,
                "previous_status": event.previous.value,
                "status_message": event.status_message,
            }
        case ev.TaskInputRequired():
            body = {
                "type": waits.task_event,
                **_task_fields(event),
                "status": "input_required",
                "outer_status": waits.outer_status,
                "input_ref": event.input_ref,
                "method": event.method,
                "params": event.params,
            }
        case ev.TaskInputAnswered():
            body = {
                "type": waits.task_answered_event,
                **_task_fields(event),
                "input_ref": event.input_ref,
            }
        case ev.TaskCancelRequested():
            body = {
                "type": "bridge.mcp_task.cancel_requested",
                **_task_fields(event),
                "requested_by": event.requested_by,
            }
        case ev.TaskDetached():
            body = {"type": "bridge.mcp_task.detached", **_task_fields(event)}
        case ev.TaskLost():
            body = {
                "type": "bridge.mcp_task.lost",
                **_task_fields(event),
                "status": "lost",
                "reason": event.reason.value,
                "detail": event.detail,
            }
        case ev.TaskTerminal():
            body = {
                "type": f"bridge.mcp_task.{event.status.value}",
                **_task_fields(event),
                "status": event.status.value,
                "result": event.result,
                "error": event.error,
                "truncated": event.truncated,
                "superseded_lost": event.superseded_lost,
            }
        case ev.ServerUnreachable():
            body = {
                "type": "bridge.mcp_server.unreachable",
                **_task_fields(event),
                "since_ms": event.since_ms,
                "detail": event.detail,
            }
        case ev.CallUnknownOutcome():
            body = {
                "type": "bridge.mcp_task.unknown_outcome",
                "op_ref": event.op_ref,
                "tool": event.tool,
                "server": event.server,
                "status": "unknown",
                "reason": event.reason,
            }
        case ev.CallResult():
            body = {
                "type": "bridge.mcp_call.result",
                "op_ref": event.op_ref,
                "tool": event.tool,
                "server": event.server,
                "is_error": event.is_error,
                "rpc_error": event.rpc_error,
            }
        case ev.CallInputRequired():  # MRTR: the call asks before any task exists
            body = {
                "type": waits.call_event,
                **_call_fields(event),
                "status": "input_required",
                "outer_status": waits.outer_status,
                "leg": event.leg,
                "input_ref": event.input_ref,
                "method": event.method,
                "params": event.params,
            }
        case ev.CallInputAnswered():
            body = {
                "type": waits.call_answered_event,
                **_call_fields(event),
                "leg": event.leg,
                "input_ref": event.input_ref,
            }
        case ev.Anomaly():
            body = {
                "type": "bridge.anomaly",
                "kind": event.kind,
                "detail": event.detail,
                "task_ref": event.task_ref,
                "op_ref": event.op_ref,
            }
        case _:
            return None
    body["bridge_seq"] = event.seq
    body["run_ref"] = event.run_ref
    return body


def _call_fields(event: ev.CallInputRequired | ev.CallInputAnswered) -> dict[str, Any]:
    return {"op_ref": event.op_ref, "tool": event.tool, "server": event.server}


def _verdict(task: TaskView) -> str | None:
    if task.lost_reason is not None:
        return f"lost:{task.lost_reason.value}"
    if task.detached_at_ms is not None:
        return "detached"
    return None


def nested_tasks_summary(reader: LedgerReader, run_ref: str) -> dict[str, Any]:
    """A compact summary of the run's nested MCP work, for the final response's ``metadata``.

    ``{"bridge_mcp_tasks": {"count", "by_status", "lost", "unknown_outcomes", "pending_input",
    "tasks": [{"task_ref", "tool", "server", "status", "verdict"}, …]}}`` (tasks capped at 50).
    """
    tasks, dispatches, pending_input = reader.run_work(run_ref)
    by_status = Counter(t.status.value for t in tasks)
    return {
        SUMMARY_KEY: {
            "count": len(tasks),
            "by_status": dict(sorted(by_status.items())),
            "lost": sum(1 for t in tasks if t.lost_reason is not None),
            "unknown_outcomes": sum(1 for d in dispatches if d.state.value == "unknown"),
            "pending_input": pending_input,
            "tasks": [
                {
                    "task_ref": t.ref,
                    "tool": t.tool_name,
                    "server": t.server_label,
                    "status": t.status.value,
                    "verdict": _verdict(t),
                }
                for t in tasks[:SUMMARY_TASK_LIMIT]
            ],
        }
    }
