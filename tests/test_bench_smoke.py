"""The benchmark command runs end to end (small sizes) and writes its report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT

pytestmark = pytest.mark.e2e  # the benchmark driver in a subprocess


def test_bench_quick_run_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(out)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        timeout=480,
    )
    text = out.read_text()
    assert "**ratio bridged / raw**" in text
    assert "Scheduler: 1,000 open handles" in text
    assert "lateness p50 / p99 / max" in text and "No handle was polled twice" in text
    assert "Polls per CPU-second: raw SDK `Client`, lean `tasks/get`, scheduler" in text
    assert "Following a UHP stream" in text
    assert "Recovery of the only replica after SIGKILL" in text
    assert "re-polling rate / raw SDK rate" in text
    assert "handles polled exactly once after the restart" in text
    assert "Claims per second on PostgreSQL" in text
    assert "20 waiting runs in the example harness" in text
    assert "| tool executed exactly once (server count) | **20/20** |" in text
    assert "16 concurrent callers: bridged `tools/call` vs the raw SDK" in text
    assert "5,000 open handles on PostgreSQL, 3 replicas" in text
    assert "| raw SDK: 20 calls + polling, wall |" in text
