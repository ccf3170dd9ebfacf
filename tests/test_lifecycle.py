"""The pure state machines, exhaustively and by property."""

from __future__ import annotations

import itertools

from hypothesis import given, strategies as st

from bridge._lifecycle import (
    CallState,
    Change,
    OuterStatus,
    TaskStatus,
    decide_outer,
    decide_task,
    may_advance_dispatch,
    may_mark_lost,
)

TERMINAL_TASK = [TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED]
LIVE_TASK = [TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED]


def test_task_live_states_move_both_ways_and_to_any_terminal() -> None:
    assert decide_task(TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED).change is Change.APPLY
    assert decide_task(TaskStatus.INPUT_REQUIRED, TaskStatus.WORKING).change is Change.APPLY
    for live, terminal in itertools.product(LIVE_TASK, TERMINAL_TASK):
        assert decide_task(live, terminal).change is Change.APPLY


def test_task_terminal_states_never_change() -> None:
    for terminal, observed in itertools.product(TERMINAL_TASK, TaskStatus):
        decision = decide_task(terminal, observed)
        if observed == terminal:
            assert decision.change is Change.UNCHANGED
        else:
            assert decision.change is Change.REGRESSION
            assert decision.is_anomaly and not decision.records_status


def test_terminal_after_lost_supersedes_the_verdict_but_live_status_does_not() -> None:
    for live, terminal in itertools.product(LIVE_TASK, TERMINAL_TASK):
        assert decide_task(live, terminal, lost=True).change is Change.SUPERSEDE_LOST
    assert decide_task(TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED, lost=True).change is (
        Change.APPLY
    )
    # Even with a lost flag, a recorded terminal status is never overwritten.
    assert decide_task(TaskStatus.COMPLETED, TaskStatus.FAILED, lost=True).is_anomaly


def test_lost_applies_only_once_and_only_to_live_handles() -> None:
    assert may_mark_lost(TaskStatus.WORKING, already_lost=False)
    assert not may_mark_lost(TaskStatus.WORKING, already_lost=True)
    for terminal in TERMINAL_TASK:
        assert not may_mark_lost(terminal, already_lost=False)


def test_outer_response_lifecycle() -> None:
    assert decide_outer(None, OuterStatus.IN_PROGRESS).change is Change.APPLY
    for terminal in [s for s in OuterStatus if s.is_terminal]:
        assert decide_outer(OuterStatus.IN_PROGRESS, terminal).change is Change.APPLY
        for observed in OuterStatus:
            expected = Change.UNCHANGED if observed == terminal else Change.REGRESSION
            assert decide_outer(terminal, observed).change is expected


def test_dispatch_moves_forward_only() -> None:
    allowed = {
        (CallState.PENDING, CallState.SENT),
        (CallState.PENDING, CallState.UNKNOWN),
        (CallState.SENT, CallState.TASK),
        (CallState.SENT, CallState.RESULT),
        (CallState.SENT, CallState.UNKNOWN),
        # MRTR: the server asked for input before any task; the answered retry is a new leg.
        (CallState.SENT, CallState.INPUT_REQUIRED),
        (CallState.INPUT_REQUIRED, CallState.SENT),
    }
    for current, target in itertools.product(CallState, CallState):
        assert may_advance_dispatch(current, target) == ((current, target) in allowed)


@given(st.lists(st.sampled_from(list(TaskStatus)), min_size=1, max_size=30))
def test_folding_any_observation_sequence_never_leaves_a_terminal_state(
    observed: list[TaskStatus],
) -> None:
    status = TaskStatus.WORKING
    first_terminal: TaskStatus | None = None
    for seen in observed:
        decision = decide_task(status, seen)
        if decision.records_status:
            status = seen
        if status.is_terminal and first_terminal is None:
            first_terminal = status
    if first_terminal is not None:
        assert status == first_terminal
