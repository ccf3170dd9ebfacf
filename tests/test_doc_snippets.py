"""Every Python block of the README and of ``docs/**/*.md`` runs, or says visibly why not.

New documents are picked up automatically: every ```` ```python ```` block of ``README.md``
and of any ``.md`` file under ``docs/`` is one of three kinds, by the line just above it:

* ``<!-- example: docs/examples/<file>.py[:<region>] -->`` — the block is that example (or
  a region of it): it equals the file's text (checked here for every document; the guides'
  rules are in ``tests/test_docs_examples.py``), and the example runs there against real
  servers. A region is a fragment, so a reader copies the guide's blocks in order: every name
  a region uses that its example *imports* must be imported by that block or an earlier
  block of the same document (no snippet silently needs an import the reader never saw).
* ``<!-- snippet: skip reason=<why> -->`` — not run; listed and counted by
  :func:`test_skipped_blocks_are_few_and_say_why` (keep them rare).
* anything else — a free-standing snippet: written to a file and run by a fresh interpreter
  in an empty folder, as a script or, when it uses top-level ``await``, as ``python -m
  asyncio`` would run it. It finds its servers in the environment: ``BRIDGE_MCP_URL`` (the
  example task server :mod:`bridge.testing.server`, no token), ``BRIDGE_UHP_URL`` /
  ``BRIDGE_UHP_TOKEN`` / ``BRIDGE_UHP_HARNESS`` (the example UHP harness); it must exit 0.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT, ServerProcess
from tests.test_docs_examples import (
    MARKER,
    UHP_HARNESS,
    UHP_TOKEN,
    Block,
    GuideError,
    blocks,
    expected_text,
    harness_config,
)

SKIP = re.compile(r"^<!-- snippet: skip reason=(\S.*\S) -->$")
MAX_SKIPPED = 4
SNIPPET_TIMEOUT_S = 120

# Runs a snippet file as a script, or with top-level await as the asyncio REPL does.
RUNNER = """
import ast, asyncio, sys
path = sys.argv[1]
code = compile(open(path).read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__", "__file__": path})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""


def documents() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def python_blocks(document: Path) -> list[Block]:
    return [b for b in blocks(document) if b.language == "python"]


def kind(block: Block) -> str:
    marker = (block.marker or "").strip()
    if MARKER.match(marker):
        return "example"
    if SKIP.match(marker):
        return "skip"
    if marker.startswith("<!-- snippet:"):
        raise GuideError(f"{block.where}: unknown snippet marker {marker!r}")
    return "run"


def all_blocks() -> list[Block]:
    return [block for document in documents() for block in python_blocks(document)]


def _free_standing() -> list[Block]:
    return [block for block in all_blocks() if kind(block) == "run"]


# --- what each block is ----------------------------------------------------------------------


def test_every_python_block_is_an_example_a_snippet_or_a_visible_skip() -> None:
    found = all_blocks()
    counts = {name: sum(kind(b) == name for b in found) for name in ("example", "run", "skip")}
    print(f"{len(found)} python blocks in {len(documents())} documents: {counts}")
    assert found and counts["run"] >= 1


def test_example_blocks_equal_their_examples() -> None:
    problems = []
    for block in all_blocks():
        if kind(block) != "example":
            continue
        try:
            _path, expected = expected_text(block)
        except GuideError as error:
            problems.append(str(error))
            continue
        if block.text != expected:
            problems.append(f"{block.where}: differs from its example")
    assert problems == []


def test_skipped_blocks_are_few_and_say_why() -> None:
    skipped = []
    for block in all_blocks():
        if kind(block) == "skip":
            reason = SKIP.match((block.marker or "").strip())
            assert reason is not None
            skipped.append(f"{block.where}: {reason.group(1)}")
    print(f"{len(skipped)} python blocks not run:", *skipped, sep="\n  ")
    assert len(skipped) <= MAX_SKIPPED, skipped


# --- a region shows the imports it needs ---------------------------------------------------------


def _parse(text: str) -> ast.Module:
    """A block as a module; a fragment from inside a function (``await``, ``return``) or one
    that ends on an open ``with``/``for`` header parses inside an async function."""
    lines = text.rstrip().splitlines()
    if lines and lines[-1].rstrip().endswith(":"):
        indent = len(lines[-1]) - len(lines[-1].lstrip())
        text = text.rstrip() + "\n" + " " * (indent + 4) + "...\n"
    try:
        return ast.parse(text)
    except SyntaxError:
        return ast.parse("async def _fragment():\n" + textwrap.indent(text, "    "))


def _imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _bound(tree: ast.AST) -> set[str]:
    names = _imported(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _used(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def missing_imports(document: Path) -> list[str]:
    """Names a region block uses that its example imports, yet no block up to it showed."""
    problems = []
    shown: set[str] = set()
    for block in python_blocks(document):
        tree = _parse(block.text)
        marked = MARKER.match((block.marker or "").strip())
        if marked is not None and marked.group(2) is not None:
            example = ast.parse((REPO_ROOT / marked.group(1)).read_text())
            missing = (_used(tree) - _bound(tree) - shown) & _imported(example)
            if missing:
                problems.append(f"{block.where}: uses {sorted(missing)}, never imported above")
        shown |= _bound(tree)
    return problems


def test_missing_import_check_sees_a_name_only_the_example_imports(tmp_path: Path) -> None:
    example = tmp_path / "docs" / "examples" / "x.py"
    example.parent.mkdir(parents=True)
    example.write_text("import os\n# --8<-- [start:a]\nprint(os.sep)\n# --8<-- [end:a]\n")
    assert "--8<--" in example.read_text()
    assert _used(_parse("print(os.sep)\n")) - _bound(_parse("print(os.sep)\n")) >= {"os"}
    assert "os" in _imported(ast.parse(example.read_text()))
    assert "os" in _bound(_parse("import os\nasync with x as y:\n"))


@pytest.mark.parametrize(
    "document",
    [d for d in documents() if any(kind(b) == "example" for b in python_blocks(d))],
    ids=lambda p: str(p.relative_to(REPO_ROOT)),
)
def test_region_blocks_show_the_imports_they_need(document: Path) -> None:
    assert missing_imports(document) == []


# --- free-standing snippets run -----------------------------------------------------------------


@dataclass(frozen=True)
class SnippetServers:
    mcp: ServerProcess
    uhp: ServerProcess

    def env(self) -> dict[str, str]:
        return {
            "BRIDGE_MCP_URL": self.mcp.url,
            "BRIDGE_UHP_URL": f"http://127.0.0.1:{self.uhp.port}",
            "BRIDGE_UHP_TOKEN": UHP_TOKEN,
            "BRIDGE_UHP_HARNESS": UHP_HARNESS,
        }


@pytest.fixture(scope="module")
def snippet_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SnippetServers]:
    folder = tmp_path_factory.mktemp("snippet-servers")
    mcp = ServerProcess("bridge.testing.server", env={"BRIDGE_MCP_TOKEN": ""})
    mcp.start()
    try:
        config = json.loads(harness_config(folder, mcp, mcp).read_text())
        config["harnesses"][0]["mcpServers"] = [
            {"name": "reports", "url": mcp.url, "enabled": True}
        ]
        (folder / "harness.json").write_text(json.dumps(config))
        uhp = ServerProcess(
            "harness_examples.report_harness",
            args=["--config", str(folder / "harness.json"), "--db", str(folder / "h.db")],
        )
        uhp.start()
        try:
            yield SnippetServers(mcp, uhp)
        finally:
            uhp.stop()
    finally:
        mcp.stop()


@pytest.mark.parametrize("block", _free_standing(), ids=lambda b: b.where)
def test_free_standing_snippet_runs(
    block: Block, snippet_servers: SnippetServers, tmp_path: Path
) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(block.text)
    env = {**os.environ, **snippet_servers.env(), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("BRIDGE_MCP_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(snippet)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SNIPPET_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (
        f"{block.where} exited {done.returncode}\n--- block\n{block.text}"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
