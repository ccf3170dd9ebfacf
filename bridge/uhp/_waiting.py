"""How an inner ``input_required`` shows on the outer run, per UHP version: one table.

No published UHP version (up to 2026-10-04) has a waiting-for-input state: a response is
``in_progress`` until it is terminal. So while a nested MCP task or a multi-round-trip call
waits for an answer, the outer response stays ``in_progress``, the wait travels in its stream
as vendor events (clients ignore types they do not know), and the final response counts what
was still pending (``bridge_mcp_tasks.pending_input``). HarnessRouter/harnessrouter#25 proposes
a waiting state; the version that publishes it becomes one more row of :data:`INPUT_WAITS`
(its status and event names), and :func:`~bridge.uhp.to_uhp_event` reads that row, so no
second path is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FIRST_VERSION = "2026-08-11"


@dataclass(frozen=True, slots=True)
class InputWaitMapping:
    """What the outer run shows while an inner request waits for input, from ``since`` on."""

    since: str  # the first UHP version this row applies to (dates sort)
    outer_status: str  # the outer response's status while an inner request waits
    task_event: str  # the stream event for ``task.input_required``
    task_answered_event: str  # ... for ``task.input_answered``
    call_event: str  # the stream event for ``call.input_required`` (MRTR, before any task)
    call_answered_event: str  # ... for ``call.input_answered``
    standard: bool  # True once the protocol itself defines the state (not a vendor event)


#: Oldest first. Every published version shares the first row: no waiting state in UHP.
INPUT_WAITS: tuple[InputWaitMapping, ...] = (
    InputWaitMapping(
        since=FIRST_VERSION,
        outer_status="in_progress",
        task_event="bridge.mcp_task.input_required",
        task_answered_event="bridge.mcp_task.input_answered",
        call_event="bridge.mcp_call.input_required",
        call_answered_event="bridge.mcp_call.input_answered",
        standard=False,
    ),
)


def input_wait_mapping(
    version: str, table: Sequence[InputWaitMapping] = INPUT_WAITS
) -> InputWaitMapping:
    """The row for ``version``: the newest whose ``since`` is not after it."""
    rows = [row for row in table if row.since <= version]
    if not rows:
        raise ValueError(f"UHP {version!r} predates every input-wait mapping")
    return max(rows, key=lambda row: row.since)
