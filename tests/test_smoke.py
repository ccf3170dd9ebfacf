"""The README's main job (until the end-to-end demo lands): the ledger smoke run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # the smoke run in a subprocess


def test_smoke_run_prints_the_nested_tree(tmp_path: Path) -> None:
    db = tmp_path / "smoke.db"
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli._smoke", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = done.stdout
    assert "response=resp_smoke0001 session=hsess_smoke0001 status=completed" in out
    assert "reports.generate_report  state=task" in out
    assert "verdict=lost(not_found)" in out
    assert "verdict: unknown outcome" in out
    assert "input 'approve-1' elicitation/create answered" in out
    assert "runs visible to another tenant: 0" in out
    assert "smoke-task-" not in out  # raw task ids stay in the ledger
    assert db.exists()
