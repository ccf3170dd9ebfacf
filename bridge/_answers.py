"""Answers built from an input request's schema, checked before anything is recorded or sent.

An elicitation is answered with ``{"action": "accept", "content": {...}}``, ``{"action":
"decline"}`` or ``{"action": "cancel"}``. :func:`build_answer` makes that shape from what a
person typed: ``KEY=VALUE`` texts (CLI ``--accept``, console forms) coerced to the types of the
request's ``requestedSchema``, or JSON content; either way the content is then checked against
the whole schema with jsonschema (a field the schema does not name is refused, as
``--accept`` refuses it). A bad answer raises :class:`~bridge.errors.InvalidAnswer`
naming every problem, one per field; nothing is recorded or sent. The console and the CLI both
answer through this one path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from bridge._errors import InvalidAnswer

Action = Literal["accept", "decline", "cancel"]
ACTIONS: tuple[Action, ...] = ("accept", "decline", "cancel")


def field_kind(spec: Mapping[str, Any]) -> str:
    """The kind of one schema property: ``enum`` (an ``enum`` or ``oneOf``/``anyOf`` of
    ``const``), ``string``, ``number``, ``integer``, ``boolean``, or ``unsupported``."""
    if enum_values(spec):
        return "enum"
    kind = spec.get("type")
    return str(kind) if kind in ("string", "number", "integer", "boolean") else "unsupported"


def enum_values(spec: Mapping[str, Any]) -> list[Any]:
    """The values an enumerated property allows, in the schema's order (empty: not one)."""
    if isinstance(spec.get("enum"), list):
        return list(spec["enum"])
    options = spec.get("oneOf") or spec.get("anyOf")
    if (
        isinstance(options, list)
        and options
        and all(isinstance(o, dict) and "const" in o for o in options)
    ):
        return [o["const"] for o in options]
    return []


def value_text(value: Any) -> str:
    """A schema value as a person types it (``true``/``false`` for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def coerce_text(spec: Mapping[str, Any], text: str) -> Any:
    """One typed text as the property's type (``ValueError`` saying why it is refused)."""
    kind = field_kind(spec)
    if kind == "boolean":
        lowered = text.strip().lower()
        if lowered in ("true", "yes"):
            return True
        if lowered in ("false", "no"):
            return False
        raise ValueError(f"choose yes/true or no/false (got {text!r})")
    if kind == "integer":
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"not a whole number: {text!r}") from None
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"not a number: {text!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"not a finite number: {text!r}")
        return int(number) if number.is_integer() and "." not in text else number
    if kind == "enum":
        for value in enum_values(spec):
            if value_text(value) == text:
                return value
        raise ValueError(f"not one of the choices: {text!r}")
    if kind == "unsupported":
        raise ValueError("this field type cannot be given as text")
    return text


def properties(schema: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """The schema's properties by name (a property that is no object counts as ``{}``)."""
    found = (schema or {}).get("properties")
    if not isinstance(found, dict):
        return {}
    return {str(k): v if isinstance(v, dict) else {} for k, v in found.items()}


def coerce_texts(
    schema: Mapping[str, Any] | None, texts: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Texts by field name as the schema's types, and a problem per field refused (a required
    field not given, an unknown field, a text that is no number, a value outside the choices)."""
    props = properties(schema)
    required = set((schema or {}).get("required") or [])
    content: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for name in texts:
        if name not in props:
            problems[name] = "no such field in the requested schema"
    for name, spec in props.items():
        text = texts.get(name)
        if text is None:
            if name in required:
                problems[name] = "required: give a value"
            continue
        try:
            content[name] = coerce_text(spec, text)
        except ValueError as exc:
            problems[name] = str(exc)
    return content, problems


def parse_pairs(input_ref: str, pairs: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` texts by key (``InvalidAnswer`` for a text with no ``=`` or a repeat)."""
    texts: dict[str, str] = {}
    problems: list[str] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"{pair!r}: expected KEY=VALUE")
        elif key in texts:
            problems.append(f"{key}: given twice")
        else:
            texts[key] = value
    if problems:
        raise InvalidAnswer(input_ref, problems)
    return texts


def schema_problems(schema: Mapping[str, Any], content: Any) -> list[str]:
    """Every way ``content`` fails the schema, one ``"field: message"`` line each."""
    import jsonschema  # loaded on first use: ``import bridge`` stays light

    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        return [f"the server's requested schema is invalid: {exc.message}"]
    errors = sorted(validator_class(dict(schema)).iter_errors(content), key=lambda e: list(e.path))
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or 'content'}: {e.message}" for e in errors
    ]


def build_answer(
    input_ref: str,
    schema: Mapping[str, Any] | None,
    action: str,
    *,
    texts: Mapping[str, str] | None = None,
    content: Any = None,
) -> dict[str, Any]:
    """The elicitation answer for ``action``, checked. ``accept`` takes ``texts`` (coerced to
    the schema's types) or ``content`` (JSON, used as is), checked against ``schema``; a
    request with no schema (URL mode) takes neither. ``decline``/``cancel`` take nothing.
    Raises :class:`~bridge.errors.InvalidAnswer` naming every problem."""
    if action not in ACTIONS:
        raise InvalidAnswer(input_ref, [f"action: choose one of {', '.join(ACTIONS)}"])
    given = bool(texts) or content is not None
    if action != "accept":
        if given:
            raise InvalidAnswer(input_ref, [f"{action} takes no content"])
        return {"action": action}
    if schema is None:
        if given:
            raise InvalidAnswer(input_ref, ["this request takes no content"])
        return {"action": "accept"}
    if texts and content is not None:
        raise InvalidAnswer(input_ref, ["give KEY=VALUE texts or JSON content, not both"])
    if content is None:
        content, problems = coerce_texts(schema, texts or {})
        if problems:
            raise InvalidAnswer(input_ref, [f"{k}: {v}" for k, v in problems.items()])
    found = schema_problems(schema, content)
    if isinstance(content, dict) and "properties" in schema:  # a form's fields are all named
        props = properties(schema)
        found += [f"{k}: no such field in the requested schema" for k in content if k not in props]
    if found:
        raise InvalidAnswer(input_ref, found)
    return {"action": "accept", "content": content}
