"""Property-based: any sequence of observations applied through the ledger keeps its promises.

* a task never leaves a terminal state, and its recorded terminal outcome is never lost or
  replaced;
* ``lost`` is a verdict beside the status: set only on a live handle, superseded (cleared) by
  a real terminal status, never set after one;
* each run's event sequence is exactly 1..n.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, strategies as st

from bridge import events as ev
from bridge._errors import TaskWasLost
from bridge._ledger.reads.views import TaskObservation, TaskView
from bridge._ledger.store import Ledger
from bridge._lifecycle import LostReason, TaskStatus
from tests.support.builders import new_run, new_task
from tests.support.properties import ledger_property_settings


@dataclass(frozen=True)
class Observe:
    status: TaskStatus
    payload: int  # distinguishes outcomes so a replaced result would be noticed
    keys: tuple[str, ...]


@dataclass(frozen=True)
class MarkLost:
    reason: LostReason


@dataclass(frozen=True)
class Answer:
    key: str


Action = Observe | MarkLost | Answer

actions = st.one_of(
    st.builds(
        Observe,
        st.sampled_from(list(TaskStatus)),
        st.integers(0, 3),
        st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True).map(tuple),
    ),
    st.builds(MarkLost, st.sampled_from(list(LostReason))),
    st.builds(Answer, st.sampled_from(["a", "b", "c"])),
)


def _observation(action: Observe) -> TaskObservation:
    requests = {
        k: {"method": "elicitation/create", "params": {"message": f"question {k}"}}
        for k in action.keys
    }
    return TaskObservation(
        status=action.status,
        result={"content": [{"type": "text", "text": str(action.payload)}], "isError": False},
        error={"code": -32603, "message": str(action.payload)},
        input_requests=requests if action.status is TaskStatus.INPUT_REQUIRED else None,
    )


def _outcome(task: TaskView) -> tuple[Any, Any]:
    return task.result, task.error


def _apply(ledger: Ledger, task_ref: str, action: Action) -> None:
    tenant = ledger.for_principal("acme")
    if isinstance(action, Observe):
        tenant.tasks.observe_task(task_ref, _observation(action))
    elif isinstance(action, MarkLost):
        tenant.tasks.mark_task_lost(task_ref, action.reason)
    else:
        task = tenant.reads.get_task(task_ref)
        asked = tenant.reads.input_requests(task_ref)
        if task.lost_reason is not None and task.terminal_at_ms is None:
            if action.key in {r.key for r in asked}:  # lost is lost: its inputs are closed
                with pytest.raises(TaskWasLost):
                    tenant.inputs.record_input_answer(task_ref, action.key, {"action": "accept"})
            return
        pending = {r.key for r in asked if r.answered_at_ms is None and r.declined_at_ms is None}
        if action.key in pending:
            tenant.inputs.record_input_answer(task_ref, action.key, {"action": "accept"})


def _check_sequence(ledger: Ledger, run_ref: str) -> None:
    tenant = ledger.for_principal("acme")
    seqs = [e.seq for e in tenant.reads.events(run_ref)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert tenant.reads.get_run(run_ref).event_count == len(seqs)


def _run_property(ledger: Ledger, script: list[Action]) -> None:
    tenant = ledger.for_principal("acme")
    run = new_run(tenant)
    task_ref = new_task(tenant, run.ref).ref
    terminal: TaskStatus | None = None
    outcome: tuple[Any, Any] | None = None
    for action in script:
        before = tenant.reads.get_task(task_ref)
        _apply(ledger, task_ref, action)
        after = tenant.reads.get_task(task_ref)
        if terminal is not None:
            assert after.status == terminal, "a terminal status changed"
            assert _outcome(after) == outcome, "a recorded terminal outcome changed"
            assert after.lost_reason is None, "a lost verdict was set after a terminal status"
        elif after.terminal_at_ms is not None:
            terminal, outcome = after.status, _outcome(after)
            assert isinstance(action, Observe) and action.status == terminal
            assert after.lost_reason is None, "a terminal status did not supersede lost"
        if isinstance(action, MarkLost) and before.is_open:
            assert after.lost_reason is action.reason
        if before.lost_reason is not None and after.terminal_at_ms is None:
            assert after.lost_reason is before.lost_reason, "a live status cleared the verdict"
    _check_sequence(ledger, run.ref)
    surfaced = [e for e in tenant.reads.events(run.ref) if isinstance(e, ev.TaskInputRequired)]
    refs = [e.input_ref for e in surfaced]
    assert len(refs) == len(set(refs)), "an input request was surfaced twice"
    assert len(refs) == len(tenant.reads.input_requests(task_ref)), (
        "a new input key went unsurfaced"
    )


@ledger_property_settings(150)
@given(script=st.lists(actions, max_size=25))
def test_any_observation_sequence_on_sqlite(sqlite_ledger: Ledger, script: list[Action]) -> None:
    _run_property(sqlite_ledger, script)


@pytest.mark.postgres
@ledger_property_settings(40)
@given(script=st.lists(actions, max_size=20))
def test_any_observation_sequence_on_postgresql(pg_ledger: Ledger, script: list[Action]) -> None:
    _run_property(pg_ledger, script)
