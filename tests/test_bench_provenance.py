"""The benchmark report names the commit it measured, and says when the code had uncommitted
changes: a figure is only comparable with another once both say what code they ran."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from bench.common import provenance


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "docs" / "benchmarks.md").write_text("# Benchmarks\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "one")
    return repo


def test_a_clean_tree_is_named_by_its_commit(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    line = provenance(repo)
    assert re.fullmatch(
        rf"Run started \d{{4}}-\d\d-\d\d \d\d:\d\d UTC at `{head}`; "
        r"load average \d+\.\d\d at the start\.",
        line,
    ), line


def test_uncommitted_code_is_said_but_a_rewritten_report_is_not(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "docs" / "benchmarks.md").write_text("# Benchmarks\nfrom the run before\n")
    assert "uncommitted" not in provenance(repo)
    (repo / "code.py").write_text("x = 2\n")
    assert "with uncommitted changes" in provenance(repo)


def test_outside_a_repository_the_commit_is_unknown(tmp_path: Path) -> None:
    assert "at `unknown commit`;" in provenance(tmp_path)
