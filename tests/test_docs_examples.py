"""Docs that run: every code block of ``docs/guides/*.md`` is checked or executed.

The rules (a guide that breaks one fails here):

* **Python blocks.** Each ```` ```python ```` block is immediately preceded by a marker line
  ``<!-- example: docs/examples/<file>.py -->`` (the block is the whole file) or
  ``<!-- example: docs/examples/<file>.py:<region> -->`` (the block is the text between
  ``# --8<-- [start:<region>]`` and ``# --8<-- [end:<region>]`` in that file, marker lines
  excluded, common indentation removed). A block that differs fails with a diff.
* **Every file in ``docs/examples/``** is referenced by some guide.
* **Every example runs**: ``python docs/examples/<file>.py`` from the repository root
  (``PYTHONPATH`` = root), with a timeout, against real servers this module starts; it must
  exit 0 (it checks what its guide claims and exits non-zero with a message otherwise); one
  that does not read ``BRIDGE_EXAMPLE_DB`` runs in a fresh folder of its own instead. Its
  environment: ``BRIDGE_EXAMPLE_REPORTS_URL`` / ``BRIDGE_EXAMPLE_PAYMENTS_URL`` (the example MCP
  servers of ``harness_examples/mcp_servers``, both protected by ``BRIDGE_EXAMPLE_TOKEN``),
  ``BRIDGE_EXAMPLE_UHP_URL`` / ``BRIDGE_EXAMPLE_UHP_TOKEN`` (the example UHP harness
  ``harness_examples.report_harness`` serving harness ``BRIDGE_EXAMPLE_UHP_HARNESS`` =
  ``chrn_reports``, whose MCP servers are ``reports`` and ``payments`` above),
  ``BRIDGE_MCP_URL`` (:mod:`bridge.testing.server`, no token),
  ``BRIDGE_EXAMPLE_DB`` (a fresh SQLite ledger path per example) and, only for an example
  whose source names it, ``BRIDGE_EXAMPLE_PG_URL`` (a fresh database on the suite's throwaway
  PostgreSQL).
* **Shell blocks** (```` ```sh ````, ```` ```console ````; in console blocks only ``$ `` lines
  are commands). ``#`` comments are dropped and ``\\`` continuations joined. ``export NAME=VALUE``
  sets variables for the guide's later commands. A ``bridge …`` line is the operator CLI, run as
  ``python -m bridge.cli …`` against the ledger written by the guide's *last* python example
  (``BRIDGE_DB`` is that ledger, whatever the guide exports), with the placeholders ``RUN``,
  ``tk_…`` and ``in_…`` replaced by references from it: read commands and ``db upgrade`` run
  for real and must exit 0; commands that act on MCP servers or wait (``recover``,
  ``cancel-task``, ``answer``, ``--follow``) are only parsed (run with ``--help`` appended,
  which still fails on an unknown command or option). A ``python docs/examples/<file>.py`` line
  must name an existing example (it runs above). Any other command is shown, not run.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge._ledger.store import Ledger
from tests.support.postgres import fresh_database
from tests.support.processes import REPO_ROOT, ServerProcess

GUIDES = REPO_ROOT / "docs" / "guides"
EXAMPLES = REPO_ROOT / "docs" / "examples"
EXAMPLE_TIMEOUT_S = 180
MCP_TOKEN = "docs-example-mcp-token"
UHP_TOKEN = "docs-example-uhp-token"
UHP_HARNESS = "chrn_reports"
PRINCIPAL = "acme"

MARKER = re.compile(r"^<!-- example: (docs/examples/[\w.-]+\.py)(?::([\w-]+))? -->$")
FENCE = re.compile(r"^```(\w*)\s*$")
# CLI commands that act on MCP servers or wait for ever: their command lines are only parsed.
PARSE_ONLY = {"recover", "cancel-task", "answer", "resolve", "ack", "close-run"}


class GuideError(Exception):
    """A guide's block does not follow the rules above."""


@dataclass(frozen=True)
class Block:
    guide: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    marker: str | None  # the line just before the fence

    @property
    def where(self) -> str:
        return f"{self.guide.relative_to(REPO_ROOT)}:{self.line}"


def guides() -> list[Path]:
    return sorted(GUIDES.rglob("*.md"))  # incl. guides/frameworks/


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.py"))


def blocks(guide: Path) -> list[Block]:
    lines = guide.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        previous = lines[index - 1] if index > 0 else None
        text = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(Block(guide, index + 1, opening.group(1), text, previous))
        index = end + 1
    return found


def region(source: str, name: str, where: str) -> str:
    """The lines between the region's markers, without them, dedented."""
    lines = source.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == f"# --8<-- [start:{name}]"]
    ends = [i for i, line in enumerate(lines) if line.strip() == f"# --8<-- [end:{name}]"]
    if not (len(starts) == 1 and len(ends) == 1 and starts[0] < ends[0]):
        raise GuideError(
            f"{where}: region {name!r} needs exactly one start and one end marker, in that order"
        )
    return textwrap.dedent("".join(lines[starts[0] + 1 : ends[0]]))


def without_region_markers(source: str) -> str:
    return "".join(line for line in source.splitlines(keepends=True) if "# --8<-- [" not in line)


def expected_text(block: Block) -> tuple[Path, str]:
    """The example file a python block names, and the text the block must equal."""
    marked = MARKER.match((block.marker or "").strip())
    if marked is None:
        raise GuideError(
            f"{block.where}: the line before the block must be "
            f"'<!-- example: docs/examples/<file>.py[:<region>] -->', not {block.marker!r}"
        )
    path = REPO_ROOT / marked.group(1)
    if not path.is_file():
        raise GuideError(f"{block.where}: {marked.group(1)} does not exist")
    source = path.read_text()
    if marked.group(2) is None:
        return path, without_region_markers(source)
    return path, region(source, marked.group(2), block.where)


def python_blocks(guide: Path) -> list[Block]:
    return [b for b in blocks(guide) if b.language == "python"]


def example_paths(guide: Path) -> list[Path]:
    """The examples a guide's python blocks come from, in document order, each once."""
    paths: list[Path] = []
    for block in python_blocks(guide):
        marked = MARKER.match((block.marker or "").strip())
        if marked is not None and (path := REPO_ROOT / marked.group(1)) not in paths:
            paths.append(path)
    return paths


# --- (a) blocks equal their examples, (b) every example is referenced ---------------------------


@pytest.mark.parametrize("guide", guides(), ids=lambda p: p.name)
def test_python_blocks_are_their_examples(guide: Path) -> None:
    problems = []
    for block in python_blocks(guide):
        try:
            path, expected = expected_text(block)
        except GuideError as unmarked:
            problems.append(str(unmarked))
            continue
        if block.text != expected:
            diff = difflib.unified_diff(
                expected.splitlines(keepends=True),
                block.text.splitlines(keepends=True),
                fromfile=str(path.relative_to(REPO_ROOT)) + (f" ({block.marker})"),
                tofile=block.where,
            )
            problems.append("".join(diff))
    assert not problems, "guide blocks differ from their examples:\n" + "\n".join(problems)


def test_every_example_is_referenced_by_a_guide() -> None:
    referenced = {path for guide in guides() for path in example_paths(guide)}
    orphans = [p.name for p in examples() if p not in referenced]
    assert not orphans, f"examples no guide shows: {orphans}"


def test_block_parser_reads_regions_and_whole_files(tmp_path: Path) -> None:
    source = (
        "import os\n\n\ndef f():\n    # --8<-- [start:body]\n    x = 1\n    # --8<-- [end:body]\n"
    )
    assert region(source, "body", "t") == "x = 1\n"
    assert without_region_markers(source) == "import os\n\n\ndef f():\n    x = 1\n"
    guide = tmp_path / "g.md"
    guide.write_text("text\n<!-- example: docs/examples/x.py:body -->\n```python\nx = 1\n```\n")
    [block] = blocks(guide)
    assert (block.language, block.text, block.line) == ("python", "x = 1\n", 3)
    assert MARKER.match(block.marker or "") is not None


# --- (c) the examples run against real servers ----------------------------------------------------


@dataclass(frozen=True)
class ExampleServers:
    reports: ServerProcess
    payments: ServerProcess
    harness: ServerProcess
    testing: ServerProcess  # bridge.testing.server, no token (the first-task guide)

    def env(self) -> dict[str, str]:
        return {
            "BRIDGE_MCP_URL": self.testing.url,
            "BRIDGE_EXAMPLE_REPORTS_URL": self.reports.url,
            "BRIDGE_EXAMPLE_PAYMENTS_URL": self.payments.url,
            "BRIDGE_EXAMPLE_TOKEN": MCP_TOKEN,
            "BRIDGE_EXAMPLE_UHP_URL": f"http://127.0.0.1:{self.harness.port}",
            "BRIDGE_EXAMPLE_UHP_TOKEN": UHP_TOKEN,
            "BRIDGE_EXAMPLE_UHP_HARNESS": UHP_HARNESS,
        }


def harness_config(folder: Path, reports: ServerProcess, payments: ServerProcess) -> Path:
    servers = [
        {"name": name, "url": proc.url, "enabled": True, "auth": {"credential_ref": "mcp"}}
        for name, proc in (("reports", reports), ("payments", payments))
    ]
    config = {
        "harnesses": [
            {"id": UHP_HARNESS, "base": "scripted", "model": "scripted-1", "mcpServers": servers}
        ],
        "tokens": [UHP_TOKEN],
        "credentials": {"mcp": MCP_TOKEN},
        "think_seconds": 0.1,
    }
    path = folder / "harness.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def example_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleServers]:
    folder = tmp_path_factory.mktemp("example-servers")
    reports = ServerProcess(
        "harness_examples.mcp_servers.report_server", args=["--token", MCP_TOKEN]
    )
    payments = ServerProcess(
        "harness_examples.mcp_servers.payments_server",
        args=["--token", MCP_TOKEN, "--ledger", str(folder / "payments.db")],
    )
    testing = ServerProcess("bridge.testing.server", env={"BRIDGE_MCP_TOKEN": ""})
    started: list[ServerProcess] = []
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            for proc, future in [(p, pool.submit(p.start)) for p in (reports, payments, testing)]:
                future.result()
                started.append(proc)
        harness = ServerProcess(
            "harness_examples.report_harness",
            args=[
                "--config",
                str(harness_config(folder, reports, payments)),
                "--db",
                str(folder / "harness.db"),
                "--log-level",
                "warning",
            ],
        )
        harness.start()
        started.append(harness)
        yield ExampleServers(reports, payments, harness, testing)
    finally:
        for proc in reversed(started):
            proc.stop()


@dataclass(frozen=True)
class ExampleRun:
    example: Path
    db: Path
    process: subprocess.CompletedProcess[str]

    def report(self) -> str:
        return (
            f"python {self.example.relative_to(REPO_ROOT)} exited {self.process.returncode}\n"
            f"--- stdout\n{self.process.stdout}\n--- stderr\n{self.process.stderr}"
        )


@pytest.fixture(scope="module")
def run_example(
    example_servers: ExampleServers,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[[Path], ExampleRun]]:
    """Runs an example once per module (the CLI checks reuse the ledger it wrote)."""
    done: dict[Path, ExampleRun] = {}
    databases = ExitStack()

    def run(example: Path) -> ExampleRun:
        if example in done:
            return done[example]
        folder = tmp_path_factory.mktemp(example.stem)
        env = {
            **os.environ,
            **example_servers.env(),
            "BRIDGE_EXAMPLE_DB": str(folder / "ledger.db"),
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        if "BRIDGE_EXAMPLE_PG_URL" in example.read_text():
            admin_url = request.getfixturevalue("postgres_admin_url")
            env["BRIDGE_EXAMPLE_PG_URL"] = databases.enter_context(fresh_database(admin_url))
        # An example that takes no BRIDGE_EXAMPLE_DB writes its ledger in the current folder
        # (as a reader's copy would): it runs in its own fresh folder.
        own_folder = "BRIDGE_EXAMPLE_DB" not in example.read_text()
        try:
            process = subprocess.run(
                [sys.executable, str(example if own_folder else example.relative_to(REPO_ROOT))],
                cwd=folder if own_folder else REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=EXAMPLE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as timeout:
            pytest.fail(
                f"{example.name} did not finish within {EXAMPLE_TIMEOUT_S}s\n"
                f"--- stdout\n{timeout.stdout!s}\n--- stderr\n{timeout.stderr!s}"
            )
        done[example] = ExampleRun(example, folder / "ledger.db", process)
        return done[example]

    with databases:
        yield run


@pytest.mark.e2e
@pytest.mark.parametrize("example", examples(), ids=lambda p: p.name)
def test_example_runs(example: Path, run_example: Callable[[Path], ExampleRun]) -> None:
    result = run_example(example)
    print(result.report())  # shown with -rP: what the example checked
    assert result.process.returncode == 0, result.report()


# --- shell blocks -------------------------------------------------------------------------------


def shell_commands(block: Block) -> list[list[str]]:
    lines = block.text.splitlines()
    if block.language == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    joined = "\n".join(lines).replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(words)
    return commands


def shell_blocks(guide: Path) -> list[Block]:
    return [b for b in blocks(guide) if b.language in ("sh", "console")]


def ledger_references(db: Path) -> dict[str, str]:
    """Placeholder -> a real reference from the example's ledger."""
    ledger = Ledger.open(db, upgrade=False)
    try:
        tenant = ledger.for_principal(PRINCIPAL)
        runs = tenant.reads.list_runs()
        assert runs, f"the example's ledger {db} holds no run of {PRINCIPAL!r}"
        run = runs[0]
        tasks = tenant.reads.list_tasks(run_ref=run.ref)
        inputs = tenant.reads.input_requests(tasks[0].ref) if tasks else []
    finally:
        ledger.close()
    return {
        "RUN": run.ref,
        "tk_…": tasks[0].ref if tasks else "tk_none",
        "in_…": inputs[0].ref if inputs else "in_none",
    }


@pytest.mark.e2e
@pytest.mark.parametrize("guide", [g for g in guides() if shell_blocks(g)], ids=lambda p: p.name)
def test_shell_blocks_run(
    guide: Path, run_example: Callable[[Path], ExampleRun], tmp_path: Path
) -> None:
    exported: dict[str, str] = {}
    cli: list[list[str]] = []
    for block in shell_blocks(guide):
        for words in shell_commands(block):
            if words[0] == "export":
                exported.update(word.split("=", 1) for word in words[1:])
            elif words[0] == "bridge":
                cli.append(words[1:])
            elif words[0].startswith("python") and words[1:2] and words[1].startswith("docs/"):
                assert (REPO_ROOT / words[1]).is_file(), f"{block.where}: {words[1]} is missing"
    if not cli:
        return
    written = example_paths(guide)
    assert written, f"{guide.name} runs the CLI but has no python example to write a ledger"
    result = run_example(written[-1])
    assert result.process.returncode == 0, result.report()
    references = ledger_references(result.db)
    env = {**os.environ, **exported, "BRIDGE_DB": str(result.db), "PYTHONPATH": str(REPO_ROOT)}
    for words in cli:
        args = [references.get(word, word) for word in words]
        parse_only = args[0] in PARSE_ONLY or "--follow" in args or "-f" in args
        command = [sys.executable, "-m", "bridge.cli", *args, *(["--help"] if parse_only else [])]
        print("$ bridge", " ".join(args), "--help" if parse_only else "")
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, (
            f"bridge {' '.join(words)} (as {' '.join(args)}) exited {done.returncode}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
