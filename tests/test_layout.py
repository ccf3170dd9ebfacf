"""The package layout is the architecture (docs/architecture.md, "Layout"): kept by tests.

Every import between ``bridge`` modules counts, at module level, inside functions and under
``TYPE_CHECKING`` alike: a type-only import still ties two modules together for a reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bridge"
MAX_LINES = 600

# Each part of the tree may import only parts of a lower rank or its own. The vocabulary
# everyone uses sits at the bottom; the ledger owns its runner and coordination; the two
# protocol sides sit on the ledger; the runtime composes them; the facade is the API; the
# operator tools and integrations sit on top. ``bridge._outcomes`` (what a call returns, and
# the input requests it may return with) is read off the MCP wire, so it sits above it.
RANKS: list[tuple[str, int]] = [
    ("bridge._answers", 0),
    ("bridge._config", 0),
    ("bridge._errors", 0),
    ("bridge._extras", 0),
    ("bridge.events", 0),
    ("bridge._ids", 0),
    ("bridge._lifecycle", 0),
    ("bridge._policies", 0),
    ("bridge._public", 0),
    ("bridge._redaction", 0),
    ("bridge._ledger", 1),
    ("bridge.errors", 1),  # the errors' public door
    ("bridge._display", 2),  # the attention items' wording, over the ledger's facts
    ("bridge._telemetry", 2),
    ("bridge._mcp.wire", 3),
    ("bridge._mcp.servers", 3),
    ("bridge._outcomes", 4),
    ("bridge._mcp", 5),
    ("bridge.uhp", 5),
    ("bridge._runtime", 6),
    ("bridge._run", 7),
    ("bridge._settings", 7),
    ("bridge._facade", 8),
    ("bridge.gateway", 9),
    ("bridge.integrations", 9),
    ("bridge.testing", 9),
    ("bridge.console", 10),  # the web console draws the CLI's timeline model
    ("bridge.cli", 10),  # the CLI starts the gateway and the console too
    ("bridge", 11),  # the package itself: the public names, exported lazily
]

# Inside the ledger and the MCP side, the same rule between their own sub-packages and modules
# (a module imports only a lower rank or its own): the pure values and the commit machinery at
# the bottom, the tenant ledger's aggregates over its base and reads, the store composing them,
# then what coordinates processes over a store; on the MCP side the wire, one client per server,
# the requests sent on it, then polling, inputs (met while polling) and calls on top.
INNER_RANKS: dict[str, list[tuple[str, int]]] = {
    "bridge._ledger": [
        ("bridge._ledger.attention_events", 0),
        ("bridge._ledger.fencing", 0),
        ("bridge._ledger.input_bounds", 0),
        ("bridge._ledger.outcome", 0),
        ("bridge._ledger.reads.views", 0),
        ("bridge._ledger.commit", 1),
        ("bridge._ledger.reads.lean_reads", 2),  # the driver session's reads, under the base
        ("bridge._ledger.runner", 2),
        ("bridge._ledger.schema", 2),
        ("bridge._ledger._base", 3),
        ("bridge._ledger.call_path", 4),
        ("bridge._ledger.reads", 4),
        ("bridge._ledger.agent_states", 5),
        ("bridge._ledger.dispatches", 5),
        ("bridge._ledger.gateway_handles", 5),
        ("bridge._ledger.inputs", 5),
        ("bridge._ledger.operator_acts", 5),
        ("bridge._ledger.rounds", 5),
        ("bridge._ledger.runs", 5),
        ("bridge._ledger.tasks", 5),
        ("bridge._ledger.webhook_outbox", 5),
        ("bridge._ledger.store", 6),
        ("bridge._ledger.coordination", 7),
        ("bridge._ledger.reader", 7),
        ("bridge._ledger.retention", 7),
    ],
    "bridge._mcp": [
        ("bridge._mcp.wire", 0),
        ("bridge._mcp.servers", 1),
        ("bridge._mcp.config_file", 2),
        ("bridge._mcp.failures", 2),
        ("bridge._mcp.legacy_shapes", 2),
        ("bridge._mcp.task_requests", 2),
        ("bridge._mcp.polling", 3),
        ("bridge._mcp.inputs", 4),
        ("bridge._mcp.calls", 5),
    ],
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imported(module: str, path: Path) -> Iterator[str]:
    """The ``bridge`` modules ``module`` imports (a name imported from a package counts as
    its submodule when there is one)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in MODULES
                else node.module
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != module:
                yield target


def _graph() -> dict[str, set[str]]:
    return {name: set(_imported(name, path)) for name, path in MODULES.items()}


def _rank(module: str, ranks: list[tuple[str, int]] = RANKS) -> int:
    for prefix, rank in ranks:
        if module == prefix or module.startswith(prefix + "."):
            return rank
    raise AssertionError(f"{module} is in no part of the layout: add it to RANKS")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    """The check above can fail: a two-module circle and a three-module one are found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_no_upward_imports() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        for target in targets
        if _rank(target) > _rank(module)
    )
    assert upward == []


def test_no_upward_imports_inside_the_ledger_and_the_mcp_side() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for package, ranks in INNER_RANKS.items()
        for module, targets in _graph().items()
        if module.startswith(package + ".")
        for target in targets
        if target.startswith(package + ".") and _rank(target, ranks) > _rank(module, ranks)
    )
    assert upward == []


def test_inner_ranks_name_what_is_there() -> None:
    """Every inner rank names a module or package that exists (a move updates the table)."""
    stale = [
        prefix for ranks in INNER_RANKS.values() for prefix, _ in ranks if prefix not in MODULES
    ]
    assert stale == []


def test_no_module_over_the_size_limit() -> None:
    # The example harness is read as a model of embedding the bridge: it keeps the same limit.
    examples = sorted((ROOT / "harness_examples").rglob("*.py"))
    paths = [*MODULES.values(), *examples]
    sizes = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in paths}
    over = sorted(str(path.relative_to(ROOT)) for path, lines in sizes.items() if lines > MAX_LINES)
    assert over == []


def test_every_package_says_what_it_is_for() -> None:
    silent = [
        name
        for name, path in MODULES.items()
        if path.name == "__init__.py" and ast.get_docstring(ast.parse(path.read_text())) is None
    ]
    assert silent == []


def _documented_tree() -> set[str]:
    """The paths drawn in docs/architecture.md's "Layout" block: two spaces per level, a
    folder ending in ``/``, each name followed by what it is for."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = doc.split("## Layout", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    paths: set[str] = set()
    folders: list[str] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        del folders[depth:]
        path = "".join(folders) + name
        paths.add(path)
        if name.endswith("/"):
            folders.append(name)
    return paths


def test_the_architecture_doc_draws_the_tree_as_it_is() -> None:
    """Every package and module of ``bridge/`` is in the doc's tree, and nothing else is."""
    sources = [path for path in PACKAGE.rglob("*.py") if "migrations" not in path.parts]
    actual = {f"{path.relative_to(ROOT).parent}/" for path in sources if path.name == "__init__.py"}
    actual |= {str(path.relative_to(ROOT)) for path in sources if path.name != "__init__.py"}
    actual |= {"bridge/_ledger/schema/migrations/"}  # Alembic's scripts, drawn as one folder
    drawn = {path for path in _documented_tree() if "migrations/" not in path[:-1]}
    assert sorted(actual - drawn) == [], "in the tree, missing from docs/architecture.md"
    assert sorted(drawn - actual) == [], "drawn in docs/architecture.md, not in the tree"
