"""The lean core in ``pyproject.toml`` matches what ``bridge/`` imports: every third-party
package a module imports is a core dependency, or belongs to an extra that the module (or a
package above it) checks with :func:`bridge._extras.require_extra` first, so a missing one is
a ``MissingExtra`` naming the extra. And each extra's import names are what it installs."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from bridge._extras import EXTRA_MODULES
from tests.support.processes import REPO_ROOT

PACKAGE = REPO_ROOT / "bridge"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


CORE = {_name(r) for r in PYPROJECT["dependencies"]}


def _extra_names(extra: str) -> set[str]:
    """The distributions ``extra`` installs, also through the extras it names."""
    names: set[str] = set()
    for requirement in PYPROJECT["optional-dependencies"][extra]:
        if requirement.startswith("uhp-mcp-bridge["):
            for nested in requirement.split("[", 1)[1].split("]", 1)[0].split(","):
                names |= _extra_names(nested.strip())
        else:
            names.add(_name(requirement))
    return names


EXTRAS = {extra: _extra_names(extra) for extra in PYPROJECT["optional-dependencies"]}
# Installed by the MCP SDK itself (so present with the core), used only by serving modules.
CHECK = re.compile(r'require_extra\(\s*"[^"]*",\s*"([\w-]+)"')
SDK_BROUGHT = {"starlette", "sse-starlette", "uvicorn"}
# Imports made only where the extra was checked earlier on the same path, with why.
GUARDED = {
    ("bridge/_ledger/commit/driver_sessions.py", "psycopg"): "only on a psycopg engine, which "
    "bridge/_ledger/schema/engine.py creates after require_extra('postgres')",
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _checked_extras(path: Path) -> set[str]:
    """The extras this module or a package above it checks with ``require_extra``."""
    found: set[str] = set()
    for folder in [path, *path.parents]:
        candidate = folder if folder.suffix == ".py" else folder / "__init__.py"
        if candidate.is_file():
            found |= set(CHECK.findall(candidate.read_text()))
        if folder == PACKAGE:
            break
    return found


def test_every_third_party_import_is_core_or_a_checked_extra() -> None:
    distributions = packages_distributions()
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        checked = _checked_extras(path)
        for name in sorted(_imports(path)):
            if name in sys.stdlib_module_names or name in ("bridge", "__future__"):
                continue
            dists = {d.lower().replace("_", "-") for d in distributions.get(name, [name])}
            if dists & CORE:
                continue
            owners = {extra for extra, names in EXTRAS.items() if dists & names}
            if owners & checked or (dists & SDK_BROUGHT and "serve" in checked):
                continue
            where = path.relative_to(REPO_ROOT)
            if (str(where), name) in GUARDED:
                continue
            problems.append(f"{where}: {name} ({sorted(dists)}) in extras {sorted(owners)}")
    assert problems == [], "\n".join(problems)


def test_each_checked_extra_provides_its_import_names() -> None:
    distributions = packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        for module in modules:
            dists = {d.lower().replace("_", "-") for d in distributions[module.split(".")[0]]}
            assert dists & (EXTRAS[extra] | SDK_BROUGHT), (extra, module, dists)


def test_the_wheel_ships_bridge_only() -> None:
    find = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert find["packages"]["find"]["include"] == ["bridge*"]
    assert (PACKAGE / "py.typed").is_file() and (REPO_ROOT / "LICENSE").is_file()
    assert "Apache License" in (REPO_ROOT / "LICENSE").read_text()
    assert PYPROJECT["license"] == "Apache-2.0" and PYPROJECT["license-files"] == ["LICENSE"]
