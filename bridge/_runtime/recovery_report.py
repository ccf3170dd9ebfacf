"""What a bridge found and took back when it opened (or when ``Bridge.recover`` ran)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bridge._ledger.reads.views import CallInputView, InputRequestView

if TYPE_CHECKING:
    from bridge.uhp._client import UnansweredPost


@dataclass(slots=True)
class RecoveryReport:
    """What a bridge found and took back when it opened (or when ``Bridge.recover`` ran): handles
    watched again, dispatches settled as unknown, answers and cancels to resend, runs to resume, and
    what still waits on the host."""

    tasks_watched: int = 0
    calls_marked_unknown: int = 0
    answers_to_redeliver: int = 0
    cancels_to_resend: int = 0
    remote_runs_resumed: int = 0
    served_runs_open: list[str] = field(default_factory=list)
    # Surfaced before the restart and still unanswered: offer them to the host again, keyed by
    # input_ref (the same reference the original task.input_required event carried); see
    # also Bridge.pending_inputs, which returns them as typed InputRequests.
    pending_inputs: list[InputRequestView] = field(default_factory=list)
    # Remote runs that never got a response id (single-process mode): re-send with repost().
    unanswered_posts: list[UnansweredPost] = field(default_factory=list)
    # The same for calls the server answered with InputRequiredResult before any task (MRTR):
    # answering one sends the call again (call.input_required events named them).
    pending_call_inputs: list[CallInputView] = field(default_factory=list)
