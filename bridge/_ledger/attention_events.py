"""Which events create an item that needs a person (an *attention* item), and of what kind.

The kinds are those of the operator's attention query; the webhook outbox row of such an
event is written in the event's own transaction (:meth:`TenantScope._append`), so an item
that exists is an item that will be pushed.
"""

from __future__ import annotations

from bridge import events as ev

INPUT_WAITING = "input_waiting"
INPUT_OVERDUE = "input_overdue"
UNKNOWN_OUTCOME = "unknown_outcome"
LOST_TASK = "lost_task"
ANOMALY = "anomaly"

#: The anomaly a webhook that kept failing becomes. It is not pushed itself: it would go to
#: the endpoint that is failing.
WEBHOOK_UNDELIVERABLE = "webhook_undeliverable"

_KIND_OF_TYPE = {
    "task.input_required": INPUT_WAITING,
    "call.input_required": INPUT_WAITING,
    "task.input_stuck": INPUT_OVERDUE,
    "call.unknown_outcome": UNKNOWN_OUTCOME,
    "task.lost": LOST_TASK,
}


def attention_kind(event: ev.BridgeEvent) -> str | None:
    """The attention kind ``event`` creates (``None``: it creates no attention item)."""
    if isinstance(event, ev.Anomaly):
        return None if event.kind == WEBHOOK_UNDELIVERABLE else ANOMALY
    return _KIND_OF_TYPE.get(event.type)


def webhook_id(run_ref: str, seq: int) -> str:
    """The stable id of the item an event created: the same on every delivery attempt, from
    every replica, so a receiver deduplicates on it."""
    return f"msg_{run_ref}_{seq}"
