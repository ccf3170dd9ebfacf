"""The benchmark command runs end to end (small sizes) and writes its report: replica
recovery and claims, and the harness under 20 waiting runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import quick_bench

pytestmark = pytest.mark.e2e  # the benchmark driver in a subprocess


def test_bench_quick_run_of_replicas_and_waits_writes_the_report(tmp_path: Path) -> None:
    text = quick_bench(tmp_path, "scale-out", "waits")
    assert "Recovery of the only replica after SIGKILL" in text
    assert "re-polling rate / raw SDK rate" in text
    assert "handles polled exactly once after the restart" in text
    assert "Claims per second on PostgreSQL" in text
    assert "20 waiting runs in the example harness" in text
    assert "| tool executed exactly once (server count) | **20/20** | **20/20** |" in text
    assert "| raw SDK: 20 calls + polling, wall |" in text
