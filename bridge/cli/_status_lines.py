"""The status lines operators read (``bridge runs``, ``bridge show``, the gateway's
``statusMessage``), worded from ledger facts at read time: nothing here is stored, so a line
changes as soon as a fact does (an answer recorded, a TTL passed, a call settled), without
any write to a status column. Pure: the clock is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from bridge._ledger.reads.call_states import CallStanding, Standing
from bridge._ledger.reads.views import InputRequestView, RunView, TaskView
from bridge._lifecycle import Admission, TaskStatus

_CALL_WORDS = {
    Standing.IN_FLIGHT: "in flight",
    Standing.WAITING_INPUT: "waiting on input",
    Standing.COMPLETED: "completed",
    Standing.FAILED: "failed",
    Standing.CANCELLED: "cancelled",
    Standing.UNRESOLVED: "unresolved",
}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# An unresolved call given a final verdict: whether it ran is settled, its result unknown.
_VERDICT_WORDS = {
    Admission.ADMITTED: "ran (verdict)",
    Admission.NOT_ADMITTED: "never ran (verdict)",
}
_WORD_ORDER = [*_CALL_WORDS.values(), *_VERDICT_WORDS.values()]


def call_word(call: CallStanding) -> str:
    """Where one call stands, in a word or two (a verdict replaces ``unresolved``)."""
    if call.verdict is not None:
        return _VERDICT_WORDS.get(call.verdict, _CALL_WORDS[call.state])
    return _CALL_WORDS[call.state]


def calls_phrase(calls: Sequence[CallStanding]) -> str:
    """``3 calls: 1 in flight, 2 completed`` (open states first)."""
    if not calls:
        return "no calls"
    by_word: dict[str, int] = {}
    for call in calls:
        word = call_word(call)
        by_word[word] = by_word.get(word, 0) + 1
    parts = [f"{by_word[w]} {w}" for w in _WORD_ORDER if w in by_word]
    return f"{_plural(len(calls), 'call')}: " + ", ".join(parts)


def run_status_line(run: RunView, calls: Sequence[CallStanding]) -> str:
    """The run's recorded outer status, then where its calls stand now. A call still open
    after the run ended (a replay sent again after its end) is said so, not hidden."""
    head = "pending (not acknowledged)" if run.status is None else run.status.value
    line = f"{head} · {calls_phrase(calls)}"
    still_open = sum(1 for c in calls if c.state.is_open)
    if run.is_terminal and still_open:
        line += f" · {_plural(still_open, 'call')} still open after the run ended"
    return line


def run_status_brief(run: RunView, calls: Sequence[CallStanding]) -> str:
    """The short form (a table cell): the outer status and how many calls are still open."""
    head = "pending" if run.status is None else run.status.value
    still_open = sum(1 for c in calls if c.state.is_open)
    if not still_open:
        return head
    return f"{head}, {still_open} open" + (" after its end" if run.is_terminal else "")


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S")


def task_status_line(task: TaskView, inputs: Sequence[InputRequestView], now_ms: int) -> str:
    """The task's status and what the ledger knows beside it: its verdicts, its input
    requests (asked, answered, delivered), a cancel not yet confirmed, a TTL already past,
    and the server's own status message (which the ledger keeps for the status it came
    with only)."""
    if task.lost_reason is not None and task.terminal_at_ms is None:
        detail = f": {task.lost_detail}" if task.lost_detail else ""
        return (
            f"lost ({task.lost_reason.value}{detail}); outcome unknown, "
            f"last seen {task.status.value}"
        )
    parts = [task.status.value]
    if task.terminal_at_ms is None:
        if task.detached_at_ms is not None:
            parts.append(f"detached at {_clock(task.detached_at_ms)}, no longer watched")
        asking = task.status is TaskStatus.INPUT_REQUIRED
        for request in inputs:  # an answer matters only while the server still asks
            if request.answered_at_ms is None or asking:
                parts.append(_input_phrase(request))
        if task.cancel_requested_at_ms is not None:
            parts.append(f"cancel requested at {_clock(task.cancel_requested_at_ms)}")
        if task.ttl_ms is not None and now_ms > task.created_at_ms + task.ttl_ms:
            parts.append("TTL passed: not terminal yet")
    if task.status_message:
        parts.append(f"server: {task.status_message!r}")
    return " · ".join(parts)


def _input_phrase(request: InputRequestView) -> str:
    if request.delivered_at_ms is not None:
        return (
            f"{request.ref} answered, delivered at {_clock(request.delivered_at_ms)}; "
            "waiting for the server to move on"
        )
    if request.answered_at_ms is not None:
        return f"{request.ref} answered at {_clock(request.answered_at_ms)}, not delivered yet"
    if request.declined_at_ms is not None:
        return f"{request.ref} declined at {_clock(request.declined_at_ms)}"
    return f"waiting on {request.ref} since {_clock(request.first_seen_ms)}"
