"""Forms generated from an input request's JSON schema (an elicitation's ``requestedSchema``).

One field per property: a string is a text box (a ``format`` picks the input type), a number or
an integer a text box the server parses, a boolean a yes/no choice (never a checkbox: an
unticked box would send nothing, and "no" must be said), an ``enum`` (or ``oneOf`` of
``const``) a drop-down. Required fields and descriptions are shown. The browser checks nothing
(``novalidate``): the server coerces and validates every value (``build_answer``,
the one path the CLI uses too) and re-renders the form with a message next to each field it
refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge._answers import value_text
from bridge.console._markup import Markup, attrs, html, join

FIELD_PREFIX = "f."  # form names of schema fields; keeps them apart from csrf/action
STRING_FORMATS = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}


@dataclass(frozen=True, slots=True)
class Choice:
    """One option of an enumerated field: the value sent and the label shown."""

    value: str
    label: str
    raw: Any = None  # the schema's own value (a number stays a number)


@dataclass(frozen=True, slots=True)
class FormField:
    """One property of the schema as a form field."""

    name: str
    kind: str  # "string", "number", "integer", "boolean", "enum", "unsupported"
    title: str
    description: str | None
    required: bool
    default: Any = None
    choices: tuple[Choice, ...] = field(default=())
    input_type: str = "text"

    @property
    def form_name(self) -> str:
        """The field's name in the posted form."""
        return FIELD_PREFIX + self.name


def _choices(spec: Mapping[str, Any]) -> tuple[Choice, ...]:
    if isinstance(spec.get("enum"), list):
        names = spec.get("enumNames")
        labels = names if isinstance(names, list) and len(names) == len(spec["enum"]) else None
        return tuple(
            Choice(value_text(value), value_text(labels[i]) if labels else value_text(value), value)
            for i, value in enumerate(spec["enum"])
        )
    options = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(options, list) and all(isinstance(o, dict) and "const" in o for o in options):
        return tuple(
            Choice(value_text(o["const"]), value_text(o.get("title", o["const"])), o["const"])
            for o in options
        )
    return ()


def form_fields(schema: Mapping[str, Any] | None) -> list[FormField]:
    """The schema's properties as fields, in the schema's order."""
    if not schema:
        return []
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = set(schema.get("required") or [])
    fields: list[FormField] = []
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type")
        choices = _choices(spec)
        if choices:
            kind = "enum"
        elif kind not in ("string", "number", "integer", "boolean"):
            kind = "unsupported"
        input_type = "text"
        if kind == "string":
            input_type = STRING_FORMATS.get(str(spec.get("format")), "text")
        fields.append(
            FormField(
                name=str(name),
                kind=str(kind),
                title=str(spec.get("title") or name),
                description=spec.get("description")
                if isinstance(spec.get("description"), str)
                else None,
                required=name in required,
                default=spec.get("default"),
                choices=choices,
                input_type=input_type,
            )
        )
    return fields


def posted_values(fields: list[FormField], form: Mapping[str, Any]) -> dict[str, str]:
    """The texts posted for the schema's fields (a field left empty is not given), and any
    other posted field as is: the answer check refuses it as the CLI does."""
    values: dict[str, str] = {}
    for item in fields:
        raw = form.get(item.form_name)
        if isinstance(raw, str) and raw.strip() != "":
            values[item.name] = raw if item.kind == "string" else raw.strip()
    known = {item.form_name for item in fields}
    for key, raw in form.items():
        if key.startswith(FIELD_PREFIX) and key not in known and isinstance(raw, str):
            values[key.removeprefix(FIELD_PREFIX)] = raw
    return values


def _initial(item: FormField, values: Mapping[str, str] | None) -> str:
    if values is not None:
        return values.get(item.name, "")
    return "" if item.default is None else value_text(item.default)


def render_fields(
    fields: list[FormField],
    *,
    values: Mapping[str, str] | None = None,
    errors: Mapping[str, str] | None = None,
    id_prefix: str,
) -> Markup:
    """The fields as HTML: label, control, description, and the field's error if any.
    ``values``: what was posted (re-rendering after an error); else the schema's defaults."""
    errors = errors or {}
    rendered = [
        _render_field(item, _initial(item, values), errors.get(item.name), f"{id_prefix}-{i}")
        for i, item in enumerate(fields)
    ]
    return join(rendered)


def _render_field(item: FormField, value: str, error: str | None, dom_id: str) -> Markup:
    described = f"{dom_id}-help" if item.description else None
    invalid = "true" if error else None
    control: Markup
    if item.kind == "boolean":
        control = join(
            html(
                '<label class="choice"><input type="radio"{}> {}</label>',
                attrs(
                    name=item.form_name,
                    value=choice,
                    checked=value == choice,
                    aria_invalid=invalid,
                    data_field=item.name,
                ),
                label,
            )
            for choice, label in (("true", "Yes"), ("false", "No"))
        )
        control = html('<span class="choices" id="{}">{}</span>', dom_id, control)
    elif item.kind == "enum":
        options = [html('<option value="">— choose —</option>')]
        options += [
            html("<option{}>{}</option>", attrs(value=c.value, selected=c.value == value), c.label)
            for c in item.choices
        ]
        control = html(
            "<select{}>{}</select>",
            attrs(
                id=dom_id,
                name=item.form_name,
                aria_invalid=invalid,
                aria_describedby=described,
                data_field=item.name,
            ),
            join(options),
        )
    elif item.kind == "unsupported":
        control = html('<span class="muted">(this field type cannot be filled here)</span>')
    else:
        control = html(
            "<input{}>",
            attrs(
                id=dom_id,
                type=item.input_type,
                name=item.form_name,
                value=value,
                inputmode="decimal" if item.kind in ("number", "integer") else None,
                aria_invalid=invalid,
                aria_describedby=described,
                data_field=item.name,
            ),
        )
    mark = html(' <span class="required" title="required">*</span>') if item.required else ""
    help_text = (
        html('<div class="help" id="{}">{}</div>', described, item.description)
        if item.description
        else ""
    )
    problem = (
        html(
            '<div class="field-error" role="alert" data-field-error="{}">{}</div>', item.name, error
        )
        if error
        else ""
    )
    return html(
        '<div class="field{}"><label for="{}">{}{}</label> <span class="kind">{}</span>'
        "<div>{}</div>{}{}</div>",
        " has-error" if error else "",
        dom_id,
        item.title,
        mark,
        item.kind,
        control,
        help_text,
        problem,
    )
