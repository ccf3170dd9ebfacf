"""The README's main job: the end-to-end demo runs, succeeds and cleans up after itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.processes import REPO_ROOT

pytestmark = pytest.mark.e2e  # the demo: servers and harness as processes


def test_demo_runs_end_to_end() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness_examples.demo"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "dropping the SSE stream on purpose" in out and "resumed from the ledger" in out
    assert "approval asked" in out
    assert "payments recorded under 'demo-pay-1': 1" in out
    assert "status=completed" in out and "two lifecycles, side by side" in out
    assert "demo OK" in out
