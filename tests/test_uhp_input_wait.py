"""How an inner ``input_required`` shows on the outer run: one versioned mapping
(``bridge.uhp._waiting``) that every UHP version served reads, and that a future version with a
waiting state (HarnessRouter/harnessrouter#25) takes over by adding one row."""

from __future__ import annotations

import pytest

from bridge import events as ev
from bridge.uhp import InputWaitMapping, input_wait_mapping, to_uhp_event
from bridge.uhp._waiting import INPUT_WAITS
from bridge.uhp.serving import SERVED_VERSIONS

ASKED = ev.TaskInputRequired(
    seq=7,
    run_ref="run_1",
    task_ref="tsk_1",
    tool="approve",
    server="payments",
    input_ref="inp_1",
    method="elicitation/create",
    params={"message": "Approve?"},
)
ANSWERED = ev.TaskInputAnswered(
    seq=8, run_ref="run_1", task_ref="tsk_1", tool="approve", server="payments", input_ref="inp_1"
)
CALL_ASKED = ev.CallInputRequired(
    seq=9,
    run_ref="run_1",
    op_ref="op_1",
    tool="approve",
    server="payments",
    leg=1,
    input_ref="inp_2",
    method="elicitation/create",
    params={},
)


@pytest.mark.parametrize("version", SERVED_VERSIONS)
def test_every_published_version_keeps_the_outer_run_in_progress(version: str) -> None:
    """No published UHP version has a waiting state: vendor events, the response in progress."""
    waits = input_wait_mapping(version)
    assert waits == INPUT_WAITS[0] and not waits.standard
    asked = to_uhp_event(ASKED, version)
    assert asked is not None
    assert (asked["type"], asked["status"], asked["outer_status"]) == (
        "bridge.mcp_task.input_required",
        "input_required",
        "in_progress",
    )
    answered = to_uhp_event(ANSWERED, version)
    assert answered is not None and answered["type"] == "bridge.mcp_task.input_answered"
    call = to_uhp_event(CALL_ASKED, version)
    assert call is not None
    assert (call["type"], call["outer_status"]) == ("bridge.mcp_call.input_required", "in_progress")


def test_a_version_with_a_waiting_state_is_one_more_row() -> None:
    """A later row applies from its version on and never to an earlier one."""
    waiting = InputWaitMapping(
        since="2027-01-15",
        outer_status="waiting",
        task_event="response.input_required",
        task_answered_event="response.input_answered",
        call_event="response.input_required",
        call_answered_event="response.input_answered",
        standard=True,
    )
    table = (*INPUT_WAITS, waiting)
    assert input_wait_mapping("2027-01-15", table) is waiting
    assert input_wait_mapping("2027-06-01", table) is waiting
    for version in SERVED_VERSIONS:
        assert input_wait_mapping(version, table) is INPUT_WAITS[0]
    with pytest.raises(ValueError, match="predates"):
        input_wait_mapping("2026-01-01", table)
