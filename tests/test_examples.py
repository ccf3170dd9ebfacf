"""The runnable example the embedding guide points at really runs."""

from __future__ import annotations

import os
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


def _embed_minimal(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness_examples.embed_minimal", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_embed_minimal_as_its_docstring_says_against_a_token_protected_server(
    tmp_path: Path,
) -> None:
    """The docstring's tool (the default, generate_report) on bridge.testing's server, the
    token given by --token or $BRIDGE_MCP_TOKEN; without it, a credentials error naming the
    server and the option, not 'unreachable'."""
    server = ServerProcess("bridge.testing.server", args=["--token", "embed-token"])
    server.start()
    try:
        args = ["--mcp-url", server.url, "--args", '{"quarter": "Q3", "sections": 1}']
        by_option = _embed_minimal(
            tmp_path, *args, "--token", "embed-token", "--db", str(tmp_path / "a.db")
        )
        assert by_option.returncode == 0, by_option.stderr
        assert "task.terminal" in by_option.stdout
        by_env = _embed_minimal(
            tmp_path, *args, "--db", str(tmp_path / "b.db"), env={"BRIDGE_MCP_TOKEN": "embed-token"}
        )
        assert by_env.returncode == 0, by_env.stderr
        refused = _embed_minimal(tmp_path, *args, "--db", str(tmp_path / "c.db"))
        assert refused.returncode == 1
        assert "refused the bridge's credentials (HTTP 401" in refused.stderr
        assert "'tools'" in refused.stderr and "unreachable" not in refused.stderr
    finally:
        server.stop()
