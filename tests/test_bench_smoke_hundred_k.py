"""The benchmark command runs end to end (small sizes) and writes its report: open handles
on PostgreSQL shared by 3 replicas."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import quick_bench

pytestmark = pytest.mark.e2e  # the benchmark driver in a subprocess


def test_bench_quick_run_of_many_handles_writes_the_report(tmp_path: Path) -> None:
    text = quick_bench(tmp_path, "hundred-k")
    assert "5,000 open handles on PostgreSQL, 3 replicas" in text
