"""The Temporal activities' hand-built JSON: exactly what Temporal's default converter wrote
for the same dataclasses (so histories recorded before replay the same), and read back equal.

The fields added for input before any task (MRTR) are written only when set: a call without
MRTR is recorded as it was before they existed, and one with MRTR as the converter writes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from temporalio.converter import DataConverter

from bridge.integrations.temporal import _wire as wire
from bridge.integrations.temporal._values import (
    AnswerRequest,
    Observation,
    OutcomeKind,
    PendingInput,
    Started,
    TaskRefs,
    ToolCall,
    ToolOutcome,
    WatchRequest,
)

CALL = ToolCall("wf-1", "tasks", "work", {"key": "k", "nested": {"n": [1, 2]}}, "wf-1:call-1")
REFS = TaskRefs("run_1", "op_1", "tk_1", 250)
OUTCOME = ToolOutcome(
    OutcomeKind.COMPLETED,
    "op_1",
    "tk_1",
    result={"content": [{"type": "text", "text": "done"}], "isError": False},
    text="done",
)
ASKED = PendingInput("in_1", "tk_1", "elicitation/create", "Which?", {"type": "object"})
ASKED_BEFORE_TASK = PendingInput(
    "in_1", None, "elicitation/create", "Which?", {"type": "object"}, op_ref="op_1"
)

CASES: list[tuple[Any, Callable[[Any], dict[str, Any]], Callable[[dict[str, Any]], Any]]] = [
    (CALL, wire.call_json, wire.call_of),
    (REFS, wire.refs_json, wire.refs_of),
    (TaskRefs("run_1", "op_1", "tk_1"), wire.refs_json, wire.refs_of),
    (OUTCOME, wire.outcome_json, wire.outcome_of),
    (
        ToolOutcome(OutcomeKind.LOST, "op_2", "tk_2", detail="gone"),
        wire.outcome_json,
        wire.outcome_of,
    ),
    (Started(handle=REFS), wire.started_json, wire.started_of),
    (Started(outcome=OUTCOME), wire.started_json, wire.started_of),
    (ASKED, wire.pending_json, wire.pending_of),
    (WatchRequest(CALL, REFS, ["in_1"], ["in_0", "in_1"]), wire.watch_json, wire.watch_of),
    (Observation(settled=OUTCOME), wire.observation_json, wire.observation_of),
    (Observation(asked=ASKED), wire.observation_json, wire.observation_of),
    (Observation(answered="in_1"), wire.observation_json, wire.observation_of),
    (
        AnswerRequest(CALL, REFS, "in_1", {"action": "accept", "content": {"a": 1}}),
        wire.answer_json,
        wire.answer_of,
    ),
    (Started(asked=[ASKED_BEFORE_TASK]), wire.started_json, wire.started_of),
    (ASKED_BEFORE_TASK, wire.pending_json, wire.pending_of),
    (Observation(asked=ASKED_BEFORE_TASK), wire.observation_json, wire.observation_of),
    (
        AnswerRequest(CALL, None, "in_1", {"action": "accept", "content": {}}, op_ref="op_1"),
        wire.answer_json,
        wire.answer_of,
    ),
]


def _without_unset_mrtr_fields(data: Any) -> Any:
    """``data`` as the converter wrote it before the MRTR fields existed: without an empty
    ``asked`` list of a start, nor an unset ``op_ref`` of an input or an answer."""
    if isinstance(data, list):
        return [_without_unset_mrtr_fields(item) for item in data]
    if not isinstance(data, dict):
        return data
    unset = {"asked": []} if "handle" in data and "outcome" in data else {}
    if "input_ref" in data:
        unset["op_ref"] = None
    return {
        key: _without_unset_mrtr_fields(item)
        for key, item in data.items()
        if not (key in unset and item == unset[key])
    }


@pytest.mark.parametrize(("value", "encode", "decode"), CASES)
def test_the_json_is_the_converters_and_reads_back_equal(
    value: Any,
    encode: Callable[[Any], dict[str, Any]],
    decode: Callable[[dict[str, Any]], Any],
) -> None:
    converter = DataConverter.default.payload_converter
    (as_converted,) = converter.from_payloads(converter.to_payloads([value]), [dict])
    as_before = converter.to_payloads([_without_unset_mrtr_fields(as_converted)])
    assert converter.to_payloads([encode(value)]) == as_before
    (data,) = converter.from_payloads(as_before, [dict])
    assert decode(data) == value
