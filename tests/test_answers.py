"""Answers built from an input request's schema (``bridge._answers``): every bad answer is an
``InvalidAnswer`` naming each problem, before anything is recorded or sent. Pure functions;
the paths that send them are tested against real servers (test_bridge_api, test_cli,
test_mrtr_operator_paths, the console tests)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge._answers import build_answer, parse_pairs
from bridge._errors import BridgeError, InvalidAnswer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean"},
        "amount": {"type": "integer", "minimum": 1},
        "currency": {"enum": ["EUR", "USD"]},
        "note": {"type": "string"},
    },
    "required": ["approve"],
}


def problems_of(**kwargs: Any) -> list[str]:
    with pytest.raises(InvalidAnswer) as refused:
        build_answer("in_x", kwargs.pop("schema", SCHEMA), kwargs.pop("action", "accept"), **kwargs)
    assert isinstance(refused.value, BridgeError)  # one error for a bad answer, under the base
    return refused.value.problems


def test_texts_are_coerced_to_the_schema_types() -> None:
    texts = {"approve": "yes", "amount": "120", "currency": "EUR", "note": "ok"}
    assert build_answer("in_x", SCHEMA, "accept", texts=texts) == {
        "action": "accept",
        "content": {"approve": True, "amount": 120, "currency": "EUR", "note": "ok"},
    }


def test_every_bad_text_is_named_at_once() -> None:
    found = problems_of(texts={"amount": "lots", "currency": "GBP", "colour": "red"})
    assert sorted(p.split(":")[0] for p in found) == ["amount", "approve", "colour", "currency"]


def test_json_content_is_checked_against_the_whole_schema() -> None:
    found = problems_of(content={"approve": "yes", "amount": 0})
    assert any(p.startswith("approve:") for p in found)
    assert any(p.startswith("amount:") for p in found)  # minimum 1: a check texts alone skip


def test_json_content_with_an_unknown_field_is_refused_as_texts_are() -> None:
    found = problems_of(content={"approve": True, "colour": "red"})
    assert found == ["colour: no such field in the requested schema"]
    assert problems_of(texts={"approve": "yes", "colour": "red"}) == found


def test_decline_and_cancel_take_nothing() -> None:
    assert build_answer("in_x", SCHEMA, "decline") == {"action": "decline"}
    assert build_answer("in_x", SCHEMA, "cancel") == {"action": "cancel"}
    assert problems_of(action="decline", content={"approve": True}) == ["decline takes no content"]


def test_unknown_action_texts_and_content_together_and_url_mode_content() -> None:
    assert problems_of(action="approve")[0].startswith("action: choose one of")
    assert problems_of(texts={"approve": "true"}, content={"approve": True}) == [
        "give KEY=VALUE texts or JSON content, not both"
    ]
    assert build_answer("in_x", None, "accept") == {"action": "accept"}  # URL mode
    assert problems_of(schema=None, content={"x": 1}) == ["this request takes no content"]


def test_an_invalid_requested_schema_is_a_problem_not_a_crash() -> None:
    found = problems_of(schema={"type": "object", "required": 3}, content={})
    assert found and found[0].startswith("the server's requested schema is invalid")


def test_pairs_need_a_key_and_an_equals_sign_once() -> None:
    assert parse_pairs("in_x", ["approve=true", "note=a=b"]) == {"approve": "true", "note": "a=b"}
    with pytest.raises(InvalidAnswer) as refused:
        parse_pairs("in_x", ["approve", "=x", "note=1", "note=2"])
    assert refused.value.problems == [
        "'approve': expected KEY=VALUE",
        "'=x': expected KEY=VALUE",
        "note: given twice",
    ]
