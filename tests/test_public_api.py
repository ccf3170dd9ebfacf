"""``bridge.__all__`` and the documented API kept in step (as httpx's
``tests/test_exported_members.py`` does), the import weight of ``import bridge``, the error tree
drawn in ``bridge/_errors.py``, and one vocabulary for event classes and their wire types."""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

import bridge
import bridge.errors
import bridge.uhp
from bridge import _errors as errors, _outcomes as outcomes, events
from bridge._runtime import step_results as results
from bridge.uhp import _errors as uhp_errors
from tests.support.imports import packages_loaded_by

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "embed-in-a-harness.md"
HEAVY = ("sqlalchemy", "mcp", "mcp_types", "httpx", "httpx2", "opentelemetry")


def _public_classes(module: object) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and not name.startswith("_")
        and value.__name__ == name  # an alias (TaskEventLike) is not a class of its own
        and value.__module__ == getattr(module, "__name__", None)
    }


def test_every_exported_name_imports_and_is_documented() -> None:
    reference = GUIDE.read_text(encoding="utf-8").split("## API reference", 1)
    assert len(reference) == 2, "the embed guide has an '## API reference' section"
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", reference[1]))
    for name in bridge.__all__:
        assert getattr(bridge, name) is not None
    assert sorted(set(bridge.__all__) - documented) == []
    assert sorted(set(bridge.errors.__all__) - documented) == []
    assert len(bridge.__all__) < 60, "bridge.__all__ stays small: put a name where it is used"
    methods = {n for n, _ in inspect.getmembers(bridge.Bridge) if not n.startswith("_")}
    methods -= {"ledger", "principals", "policies", "settings", "last_recovery"}
    assert sorted(methods - documented) == [], "a public Bridge method is not documented"
    run_methods = {n for n, _ in inspect.getmembers(bridge.Run) if not n.startswith("_")}
    assert sorted(run_methods - documented) == [], "a public Run method is not documented"
    reader_methods = {
        n for n, _ in inspect.getmembers(bridge.LedgerReader) if not n.startswith("_")
    }
    assert sorted(reader_methods - documented) == [], "a LedgerReader method is not documented"
    event_classes = _public_classes(events) | {"BridgeEvent", "FINAL_TASK_EVENTS"}
    assert sorted(event_classes - documented) == [], "an event class is not documented"
    stale = documented - set(bridge.__all__) - set(bridge.uhp.__all__)
    stale -= set(bridge.errors.__all__)
    stale -= methods | run_methods | reader_methods | event_classes
    assert sorted(stale) == [], "documented but neither exported nor a Bridge method"
    assert sorted(bridge.__all__) == sorted(set(dir(bridge)) & set(bridge.__all__))


@pytest.mark.parametrize(
    ("module", "door"),
    [(errors, bridge.errors), (uhp_errors, bridge.uhp), (results, bridge), (outcomes, bridge)],
)
def test_nothing_public_is_missing_from_all(module: object, door: object) -> None:
    assert sorted(_public_classes(module) - set(door.__all__)) == []  # type: ignore[attr-defined]


def test_exported_names_are_unique_objects() -> None:
    classes = [getattr(bridge, n) for n in bridge.__all__ if inspect.isclass(getattr(bridge, n))]
    names = [c.__name__ for c in classes]
    assert len(names) == len(set(names))


def test_the_cli_loads_the_mcp_stack_only_for_the_commands_that_talk_to_a_server() -> None:
    """``bridge runs|show|events|timeline`` read the ledger: importing the CLI must not pay for
    the MCP SDK (about a second of every command's start on these machines)."""
    assert packages_loaded_by("import bridge.cli._app", ("mcp", "mcp_types", "httpx2")) == []


def test_import_bridge_loads_no_heavy_dependency() -> None:
    assert packages_loaded_by("import bridge", HEAVY) == []


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = bridge.NoSuchThing  # type: ignore[attr-defined]


def test_event_class_names_spell_their_wire_type() -> None:
    """``call.result`` is ``CallResult``, ``step.recoverable_failure`` is
    ``StepRecoverableFailure``: one name per concept, in code and on the wire."""
    for name in _public_classes(events):
        cls = getattr(events, name)
        if not (issubclass(cls, BaseModel) and "type" in cls.model_fields):
            continue
        wire = cls.model_fields["type"].default
        camel = "".join(part.capitalize() for part in re.split(r"[._]", wire))
        assert camel == name, (name, wire)


def test_final_task_events() -> None:
    lost = events.TaskLost(task_ref="t", tool="x", server="s", reason="ttl_expired")
    assert lost.is_final
    assert not events.TaskCreated(
        task_ref="t",
        tool="x",
        server="s",
        op_ref="o",
        status="working",
        ttl_ms=None,
        poll_interval_ms=None,
    ).is_final
    assert set(events.FINAL_TASK_EVENTS) == {events.TaskTerminal, events.TaskLost}


def test_error_tree_drawing_matches_the_classes() -> None:
    doc = errors.__doc__ or ""
    lines = doc.split("    BridgeError\n", 1)[1].split("\n\n", 1)[0].splitlines()
    drawn: dict[str, str] = {}
    stack = ["BridgeError"]
    for line in lines:
        match = re.match(r"^    ((?:[│ ]   )*)[├└]── (\w+)", line)
        assert match, line
        depth = len(match.group(1)) // 4 + 1
        del stack[depth:]
        drawn[match.group(2)] = stack[-1]
        stack.append(match.group(2))
    public = {n: getattr(bridge.errors, n) for n in bridge.errors.__all__}
    public |= {n: getattr(bridge.uhp, n) for n in bridge.uhp.__all__}
    tree_classes = {
        name
        for name, value in public.items()
        if inspect.isclass(value) and issubclass(value, errors.BridgeError)
    } - {"BridgeError"}
    assert set(drawn) == tree_classes
    for name, parent in drawn.items():
        assert public[parent] in public[name].__bases__, (name, parent)


def _undocumented(name: str, value: object) -> list[str]:
    """``name`` and its public methods and properties that carry no docstring of their own (a
    dataclass's generated ``Name(field, ...)`` signature does not count as one)."""
    missing: list[str] = []
    if typing.get_origin(value) is not None:
        return missing  # a type alias (``CredentialResolver``) carries its comment in source
    own = (inspect.getdoc(value) or "") if inspect.isclass(value) else (value.__doc__ or "")
    if inspect.isclass(value) and (value.__doc__ or "").startswith(f"{value.__name__}("):
        own = ""
    if not own.strip() and (inspect.isclass(value) or callable(value)):
        missing.append(name)
    if inspect.isclass(value):
        for attribute, member in vars(value).items():
            if attribute.startswith("_"):
                continue
            function = member.fget if isinstance(member, property) else member
            if callable(function) and not (getattr(function, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attribute}")
    return missing


def test_every_public_name_and_its_methods_have_a_docstring() -> None:
    missing = [m for name in bridge.__all__ for m in _undocumented(name, getattr(bridge, name))]
    assert missing == []


def test_the_docstring_check_finds_a_missing_one() -> None:
    class Documented:
        """Has one."""

        def method(self) -> None:
            pass

    assert _undocumented("Documented", Documented) == ["Documented.method"]


def test_call_tool_returns_one_type_whose_kind_names_its_class() -> None:
    """``Run.call_tool`` returns ``CallOutcome``; each outcome class has its own ``kind``, and
    every ``OutcomeKind`` names exactly one class, so switching on ``kind`` misses nothing."""
    hints = typing.get_type_hints(bridge.Run.call_tool)
    assert hints["return"] is outcomes.CallOutcome
    classes = [cls for cls in _subclasses(outcomes.CallOutcome) if not inspect.isabstract(cls)]
    kinds = [cls.kind for cls in classes]
    assert len(kinds) == len(set(kinds)), "two outcome classes share a kind"
    assert set(kinds) == set(outcomes.OutcomeKind)
    for cls in classes:
        assert cls.__name__ in bridge.__all__, f"{cls.__name__} is not exported"
    with pytest.raises(TypeError):
        outcomes.CallOutcome()  # type: ignore[abstract]


def _subclasses(cls: type) -> list[type]:
    """Subclasses as their modules name them (``slots=True`` dataclasses leave the class they
    replaced behind in ``__subclasses__`` until it is collected)."""
    found = []
    for sub in cls.__subclasses__():
        if getattr(importlib.import_module(sub.__module__), sub.__name__, None) is sub:
            found += [sub, *_subclasses(sub)]
    return found
