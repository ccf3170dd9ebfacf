"""One public door: the modules a user may import are listed here, everything else is private
(a leading underscore on the module or a package above it), public names carry their public
``__module__``, and no guide, example or example harness imports a private path."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = {
    "bridge",
    "bridge.errors",
    "bridge.events",
    "bridge.uhp",
    "bridge.uhp.serving",
    "bridge.testing",
    "bridge.testing.__main__",
    "bridge.testing.server",
    "bridge.testing.langgraph",
    "bridge.testing.pydantic_ai",
    "bridge.integrations",
    "bridge.integrations.pydantic_ai",
    "bridge.integrations.openai_agents",
    "bridge.integrations.langgraph",
    "bridge.integrations.dbos",
    "bridge.integrations.temporal",
    "bridge.cli",
    "bridge.cli.__main__",
    "bridge.console",
    "bridge.console.__main__",
    "bridge.gateway",
    "bridge.gateway.__main__",
}
DOORS = ("bridge", "bridge.errors", "bridge.uhp", "bridge.uhp.serving")
PRIVATE_IMPORT = re.compile(
    r"^\s*(?:from\s+(bridge(?:\.\w+)*)\s+import\s+(.*)|import\s+(bridge(?:\.\w+)*))", re.M
)


def _modules() -> set[str]:
    names = set()
    for path in (ROOT / "bridge").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.add(".".join(parts))
    return names


def _is_private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split("."))


def test_every_public_module_is_listed() -> None:
    public = {m for m in _modules() if not _is_private(m)}
    assert sorted(public - PUBLIC_MODULES) == [], "a new public module: make it private or list it"
    assert sorted(PUBLIC_MODULES - public) == [], "listed as public but not in the tree"


def _private_imports(text: str) -> list[str]:
    found = []
    for match in PRIVATE_IMPORT.finditer(text):
        module = match.group(1) or match.group(3)
        names = match.group(2) or ""
        if _is_private(module) or re.search(r"(^|[\s(,])_[a-z]\w*", names):
            found.append(match.group(0).strip())
    return found


def _user_facing_files() -> list[Path]:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "docs").rglob("*.py")]
    files += list((ROOT / "harness_examples").rglob("*.py"))
    return sorted(files)


@pytest.mark.parametrize("path", _user_facing_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_and_examples_import_only_public_paths(path: Path) -> None:
    assert _private_imports(path.read_text(encoding="utf-8")) == []


def test_the_private_import_check_finds_one() -> None:
    assert _private_imports("from bridge._ledger.store import Ledger\n")
    assert _private_imports("import bridge.uhp._client\n")
    assert _private_imports("from bridge.uhp import _client\n")
    assert not _private_imports("from bridge import Bridge, Ledger\nimport bridge.uhp\n")


# The bridge's products (and its users) read through its public methods (``Bridge.read``),
# never through the facade's private ledger or runner (``_db``; ``_runner`` was its old door).
PRODUCTS = ("bridge/console", "bridge/gateway", "bridge/integrations", "bridge/cli")
FACADE_PRIVATES = {"_ledger", "_runner", "_db"}


def _reach_throughs(text: str, suffix: str) -> list[str]:
    if suffix == ".md":  # its python snippets (prose may name the private module)
        code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
        return re.findall(r"\S*\._(?:ledger|runner|db)\b", code)
    return [
        f"line {node.lineno}: .{node.attr}"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Attribute) and node.attr in FACADE_PRIVATES
    ]


def _outside_the_core() -> list[Path]:
    files = [path for part in PRODUCTS for path in (ROOT / part).rglob("*.py")]
    return sorted(files) + _user_facing_files()


@pytest.mark.parametrize("path", _outside_the_core(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_outside_the_core_reaches_into_the_bridges_ledger_or_runner(path: Path) -> None:
    assert _reach_throughs(path.read_text(encoding="utf-8"), path.suffix) == []


def test_the_reach_through_check_finds_one() -> None:
    assert _reach_throughs("t = self.bridge._ledger.for_principal(p)\n", ".py")
    assert _reach_throughs("await bridge._runner(f)\n", ".py")
    assert _reach_throughs("await self.bridge._db(f)\n", ".py")
    assert _reach_throughs("```python\nbridge._ledger.close()\n```\n", ".md")
    assert not _reach_throughs("from bridge._ledger.store import Ledger\n", ".py")
    assert not _reach_throughs("See `bridge._ledger`.\n```python\nx = 1\n```\n", ".md")


@pytest.mark.parametrize("door", DOORS)
def test_public_names_carry_their_public_module(door: str) -> None:
    module = importlib.import_module(door)
    wrong = []
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        where = value.__module__
        if where.startswith("bridge.") and _is_private(where):
            wrong.append(f"{name}: {where}")
    assert wrong == []


def test_the_top_level_and_the_concepts_a_harness_author_needs_stay_few() -> None:
    """``bridge.__all__`` stays under 60 names, and the embed guide's table of concepts (what
    a harness author needs to embed, answer and recover) has at most 20 rows, as many as its
    heading says, each naming something that exists."""
    import bridge
    import bridge.errors
    import bridge.events

    assert len(bridge.__all__) < 60, len(bridge.__all__)
    guide = (ROOT / "docs/guides/embed-in-a-harness.md").read_text()
    heading = re.search(r"^## The concepts you need \((\d+)\)$", guide, re.M)
    assert heading is not None
    section = guide[heading.end() : guide.index("\n## ", heading.end())]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|", section, re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    assert len(rows) == int(heading.group(1)) <= 20
    for _, concept in rows:
        name = re.fullmatch(r"`(\w+)(?:\.(\w+))?`", concept)
        if name is None:  # a concept in words (events, recovery, operation id)
            continue
        owner = next(
            (m for m in (bridge, bridge.errors, bridge.events) if hasattr(m, name.group(1))),
            None,
        )
        assert owner is not None, concept
        assert name.group(2) is None or hasattr(getattr(owner, name.group(1)), name.group(2))
