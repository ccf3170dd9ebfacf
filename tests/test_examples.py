"""The runnable example the embedding guide points at really runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT, ServerProcess

pytestmark = pytest.mark.e2e  # an example run as a process against a server process


def test_embed_minimal_runs_a_task_to_completion(
    tmp_path: Path, tasks_server: ServerProcess
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness_examples.embed_minimal",
            "--mcp-url",
            tasks_server.url,
            "--tool",
            "slow_report",
            "--args",
            '{"quarter": "Q3", "seconds": 0.2}',
            "--db",
            str(tmp_path / "l.db"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = done.stdout
    assert "step: TaskPending" in out
    assert "task.created" in out and "task.terminal" in out
    assert "outer OuterStatus.COMPLETED" in out or "outer completed" in out
