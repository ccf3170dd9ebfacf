"""The scripted agent's planner: a deterministic plan from the task input (no model).

See the package docstring for the instruction format. ``plan()`` is a pure function of the
input text and the session's earlier answers, so a restarted harness rebuilds the same plan
and resumes it at the persisted step.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

POLICIES = ("wait", "detach", "ask", "fail_recoverable")

_CALL = re.compile(
    r"^\s*call\s+(?P<server>[A-Za-z0-9_-]+)\.(?P<tool>[A-Za-z0-9_.-]+)"
    r"(?:\s+(?P<args>\{.*\}))?(?:\s+policy=(?P<policy>[a-z_]+))?\s*$",
    re.IGNORECASE,
)
_REPLY_WORD = re.compile(r"reply\s+with\s+(?:only\s+)?the\s+word\s+[\"'`]?([^\s\"'`.,!?]+)", re.I)
_REPLY_EXACT = re.compile(r"reply\s+with\s+exactly\s*:?\s*(.+)", re.I)
_COUNT = re.compile(r"count\s+slowly\s+(?:from\s+(\d+)\s+)?(?:up\s+)?to\s+(\d+)", re.I)
_REPEAT = re.compile(r"repeat\s+(?:your|the)\s+(?:last|previous)\s+answer", re.I)
MAX_COUNT = 10_000


class PlanError(ValueError):
    """The input asks for something malformed (answered as 400 invalid_input)."""


@dataclass(frozen=True)
class ToolStep:
    server: str
    tool: str
    arguments: dict[str, Any]
    policy: str | None  # None: the harness's configured policy


@dataclass(frozen=True)
class ReplyStep:
    text: str


@dataclass(frozen=True)
class CountStep:
    start: int
    end: int


Step = ToolStep | ReplyStep | CountStep


def _tool_step(match: re.Match[str], line: str) -> ToolStep:
    raw = match.group("args") or "{}"
    try:
        arguments = json.loads(raw)
    except ValueError:
        raise PlanError(f"the arguments of {line.strip()!r} are not valid JSON") from None
    if not isinstance(arguments, dict):
        raise PlanError(f"the arguments of {line.strip()!r} must be a JSON object")
    policy = match.group("policy")
    if policy is not None and policy.lower() not in POLICIES:
        raise PlanError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    return ToolStep(
        match.group("server"), match.group("tool"), arguments, policy.lower() if policy else None
    )


def plan(text: str, previous_answer: str | None = None) -> list[Step]:
    """The steps for ``text``: tool calls in order, then exactly one answering message."""
    steps: list[Step] = []
    prose: list[str] = []
    for line in text.splitlines():
        match = _CALL.match(line)
        if match is not None:
            steps.append(_tool_step(match, line))
        elif line.strip():
            prose.append(line.strip())
    said = " ".join(prose)
    if (m := _COUNT.search(said)) is not None:
        start = int(m.group(1)) if m.group(1) else 1
        end = int(m.group(2))
        if end - start > MAX_COUNT:
            raise PlanError(f"counting is limited to {MAX_COUNT} numbers")
        steps.append(CountStep(start, end))
    elif (m := _REPLY_WORD.search(said)) is not None:
        steps.append(ReplyStep(m.group(1)))
    elif (m := _REPLY_EXACT.search(said)) is not None:
        steps.append(ReplyStep(m.group(1).strip()))
    elif _REPEAT.search(said):
        steps.append(ReplyStep(previous_answer or "There is no earlier answer in this session."))
    elif said:
        steps.append(ReplyStep(f"Scripted agent received {len(said.split())} word(s): {said}"))
    else:
        steps.append(ReplyStep(""))  # filled in from the tool results (see summary_text)
    return steps


def summary_text(output: list[dict[str, Any]]) -> str:
    """The final answer of a tool-only plan: one line per tool call and its outcome."""
    lines = []
    names = {i.get("call_id"): i.get("name") for i in output if i.get("type") == "function_call"}
    for item in output:
        if item.get("type") == "function_call_output":
            try:
                outcome = json.loads(item.get("output") or "{}").get("outcome", "?")
            except ValueError:
                outcome = "?"
            lines.append(f"{names.get(item.get('call_id'), '?')}: {outcome}")
    return "\n".join(lines) if lines else "Nothing to do."


def input_text(items: list[dict[str, Any]]) -> str:
    """The user text of normalised input items."""
    texts: list[str] = []
    for item in items:
        for part in item.get("content") or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return "\n".join(texts)


def normalise_input(value: Any) -> list[dict[str, Any]]:
    """``input`` as a list of message items with ``input_text`` parts (Core accepts text)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [_text(value)]}]
    if not isinstance(value, list) or not value:
        raise PlanError("'input' must be a string or a non-empty list of input items")
    items: list[dict[str, Any]] = []
    for raw in value:
        if isinstance(raw, str):
            items.append({"type": "message", "role": "user", "content": [_text(raw)]})
        elif isinstance(raw, dict) and raw.get("type") == "input_text":
            items.append({"type": "message", "role": "user", "content": [_text(raw.get("text"))]})
        elif isinstance(raw, dict):
            content = raw.get("content")
            if isinstance(content, str):
                parts = [_text(content)]
            elif isinstance(content, list):
                parts = [
                    _text(p.get("text")) if p.get("type") in ("input_text", "text", None) else p
                    for p in content
                    if isinstance(p, dict)
                ]
            else:
                raise PlanError("an input item needs 'content'")
            items.append(
                {"type": "message", "role": str(raw.get("role") or "user"), "content": parts}
            )
        else:
            raise PlanError("input items must be strings or objects")
    return items


def _text(value: Any) -> dict[str, Any]:
    if not isinstance(value, str):
        raise PlanError("an input_text part needs a string 'text'")
    return {"type": "input_text", "text": value}
